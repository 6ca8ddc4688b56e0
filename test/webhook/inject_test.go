package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	apinetworkingv1beta1 "istio.io/api/networking/v1beta1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// istioInjectorConfigMap is the istio-sidecar-injector ConfigMap of a
// default Istio install (shared/testdata/istio-inject/configmaps.yaml):
// an existing cluster's ConfigMap, used unchanged.
func istioInjectorConfigMap(t *testing.T, namespace string) *corev1.ConfigMap {
	t.Helper()
	raw, err := os.ReadFile(fixtures.Shared(t, "istio-inject/configmaps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---") {
		cm := &corev1.ConfigMap{}
		if err := yaml.Unmarshal([]byte(doc), cm); err != nil {
			t.Fatal(err)
		}
		if cm.Kind == "ConfigMap" && cm.Name == "istio-sidecar-injector" {
			cm.Namespace, cm.ResourceVersion, cm.UID = namespace, "", ""
			return cm
		}
	}
	t.Fatal("configmaps.yaml has no istio-sidecar-injector ConfigMap")
	return nil
}

// chartInjectorConfigMap renders the chart's istio-sidecar-injector
// ConfigMap with the real helm and sets.
func chartInjectorConfigMap(t *testing.T, namespace string, sets ...string) *corev1.ConfigMap {
	t.Helper()
	chart := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot")
	args := []string{"template", "meshpilot", chart, "-n", namespace, "--kube-version", kubetest.KubeVersion,
		"--show-only", "templates/injector-configmap.yaml"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(kubetest.Helm(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.UnmarshalStrict(out, cm); err != nil {
		t.Fatalf("chart's ConfigMap: %v\n%s", err, out)
	}
	return cm
}

// chartMutatingWebhook renders the chart's MutatingWebhookConfiguration with
// the real helm, then points every webhook by URL at addr (keeping the
// chart's path) and trusts caBundle, as the leader's patcher would for the
// Service. It is created as name and deleted when the test ends.
func chartMutatingWebhook(t *testing.T, name, addr string, caBundle []byte) {
	t.Helper()
	chart := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot")
	out, err := exec.Command(kubetest.Helm(t), "template", "meshpilot", chart, "-n", "istio-system", "--kube-version", kubetest.KubeVersion,
		"--show-only", "templates/mutatingwebhook.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(out, mwc); err != nil {
		t.Fatalf("chart's MutatingWebhookConfiguration: %v\n%s", err, out)
	}
	if len(mwc.Webhooks) == 0 {
		t.Fatalf("chart's MutatingWebhookConfiguration has no webhooks:\n%s", out)
	}
	mwc.Name = name
	for i := range mwc.Webhooks {
		cc := &mwc.Webhooks[i].ClientConfig
		path := "/inject"
		if cc.Service != nil && cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		url := "https://" + addr + path
		cc.Service, cc.URL, cc.CABundle = nil, &url, caBundle
	}
	hooks := env.Clientset().AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := hooks.Create(t.Context(), mwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create MutatingWebhookConfiguration: %v", err)
	}
	t.Cleanup(func() {
		if err := hooks.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete MutatingWebhookConfiguration %s: %v", name, err)
		}
	})
}

// namespace creates a namespace with labels and its default ServiceAccount
// (no controller manager runs here to make it).
func namespace(t *testing.T, cs kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if _, err := cs.CoreV1().ServiceAccounts(name).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create ServiceAccount %s/default: %v", name, err)
	}
}

func appPod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		// kubetest runs without the ServiceAccount admission plugin, which
		// would default this; the injected istio-token volume requires it.
		Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{
			Name: "app", Image: "docker.io/istio/examples-bookinfo-details-v1:1.20.2",
			Ports: []corev1.ContainerPort{{ContainerPort: 9080}},
		}}},
	}
}

// containerNames lists the stored pod's init containers and containers.
func containerNames(p *corev1.Pod) (init, main []string) {
	for _, c := range p.Spec.InitContainers {
		init = append(init, c.Name)
	}
	for _, c := range p.Spec.Containers {
		main = append(main, c.Name)
	}
	return init, main
}

func injected(p *corev1.Pod) bool {
	init, main := containerNames(p)
	all := strings.Join(append(init, main...), ",")
	return strings.Contains(all, "istio-init") && strings.Contains(all, "istio-proxy") &&
		p.Annotations["sidecar.istio.io/status"] != ""
}

// TestInjectionThroughAPIServer: with Istio's own istio-sidecar-injector
// ConfigMap and the chart's MutatingWebhookConfiguration as helm renders
// it, pods created with client-go are stored injected exactly where Istio
// injects them; with the webhook down, failurePolicy Fail refuses them.
func TestInjectionThroughAPIServer(t *testing.T) {
	cs := env.Clientset()
	const cpNS = "istio-system"
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cpNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm := istioInjectorConfigMap(t, cpNS)
	if _, err := cs.CoreV1().ConfigMaps(cpNS).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap istio-sidecar-injector: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ConfigMaps(cpNS).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	srv, stop := setup(t)
	chartMutatingWebhook(t, "inject-e2e", srv.HTTPSListenAddr(), srv.Authority().Bundle().RootPEM)

	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	on, rev, off := "inject-on-"+suffix, "inject-rev-"+suffix, "inject-off-"+suffix
	namespace(t, cs, on, map[string]string{"istio-injection": "enabled"})
	namespace(t, cs, rev, map[string]string{"istio.io/rev": "default"})
	namespace(t, cs, off, nil)

	// The configuration takes effect once the API server's informer sees it:
	// create until the stored pod is injected.
	var pod *corev1.Pod
	attempt := 0
	testutil.EventuallyNoError(t, 30*time.Second, "a pod in an istio-injection=enabled namespace injected", func() error {
		attempt++
		created, err := cs.CoreV1().Pods(on).Create(t.Context(), appPod(fmt.Sprintf("details-%d", attempt), nil), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !injected(created) {
			init, main := containerNames(created)
			return fmt.Errorf("pod %s stored with init containers %v, containers %v", created.Name, init, main)
		}
		pod = created
		return nil
	})
	init, main := containerNames(pod)
	t.Logf("injected: init containers %v, containers %v", init, main)
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == "istio-proxy" && !strings.Contains(c.Image, "proxyv2") {
			t.Errorf("istio-proxy image %q, want Istio's proxyv2 (from the ConfigMap's values)", c.Image)
		}
	}

	cases := []struct {
		name, ns string
		labels   map[string]string
		want     bool
	}{
		{"unlabelled-namespace", off, nil, false},
		{"inject-false", on, map[string]string{"sidecar.istio.io/inject": "false"}, false},
		{"rev-label-namespace", rev, nil, true},
		{"inject-true-pod-label", off, map[string]string{"sidecar.istio.io/inject": "true"}, true},
	}
	for _, tc := range cases {
		p, err := cs.CoreV1().Pods(tc.ns).Create(t.Context(), appPod(tc.name, tc.labels), metav1.CreateOptions{})
		if err != nil {
			t.Errorf("%s: create: %v", tc.name, err)
			continue
		}
		if got := injected(p); got != tc.want {
			init, main := containerNames(p)
			t.Errorf("%s: injected = %v, want %v (init containers %v, containers %v)", tc.name, got, tc.want, init, main)
		}
		if !tc.want && (len(p.Spec.Containers) != 1 || len(p.Spec.InitContainers) != 0 || len(p.Annotations) != 0) {
			t.Errorf("%s: pod changed: containers %d, init containers %d, annotations %v", tc.name,
				len(p.Spec.Containers), len(p.Spec.InitContainers), p.Annotations)
		}
	}
	if v := bootstraptest.MetricValue(t, srv, "sidecar_injection_success_total"); v < 3 {
		t.Errorf("sidecar_injection_success_total = %v, want at least 3", v)
	}

	// The chart's own ConfigMap (its templates, meshpilot's agent image)
	// replaces Istio's: the injector picks it up, and the API server stores
	// what its templates make, defaulting their source-less volumes to
	// emptyDir as it does for Istio's.
	chartCM := chartInjectorConfigMap(t, cpNS, "sidecarInjector.agentImage=meshpilot")
	chartCM.ResourceVersion = ""
	if _, err := cs.CoreV1().ConfigMaps(cpNS).Update(t.Context(), chartCM, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update ConfigMap istio-sidecar-injector to the chart's: %v", err)
	}
	attempt = 0
	testutil.EventuallyNoError(t, 30*time.Second, "a pod injected from the chart's ConfigMap", func() error {
		attempt++
		p, err := cs.CoreV1().Pods(on).Create(t.Context(), appPod(fmt.Sprintf("chart-%d", attempt), nil), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		var image string
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			if c.Name == "istio-proxy" {
				image = c.Image
			}
		}
		if !strings.Contains(image, "/pilot-agent:") {
			return fmt.Errorf("pod %s: istio-proxy image %q, want the chart's pilot-agent image", p.Name, image)
		}
		for _, v := range p.Spec.Volumes {
			if v.Name == "workload-socket" && v.EmptyDir == nil {
				t.Errorf("stored volume workload-socket has no emptyDir: %+v", v.VolumeSource)
			}
		}
		return nil
	})

	checkNativeSidecarsFollowKubelets(t, cs, on)

	// Webhook down: the chart's failurePolicy Fail refuses the pod, naming the webhook.
	stop()
	_, err := cs.CoreV1().Pods(on).Create(t.Context(), appPod("while-down", nil), metav1.CreateOptions{})
	if err == nil {
		t.Fatal("pod created with the injection webhook down and failurePolicy Fail")
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !strings.Contains(err.Error(), `failed calling webhook "namespace.sidecar-injector.istio.io"`) {
		t.Fatalf("with the webhook down: %v; want a refusal naming the webhook", err)
	}
	t.Logf("with the webhook down: %v", err)
}

// checkNativeSidecarsFollowKubelets: istio-proxy is a native sidecar (an
// init container with restartPolicy Always) only while every node's kubelet
// is 1.29 or later; a 1.28 node turns it back into a container.
func checkNativeSidecarsFollowKubelets(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	nativeProxy := func(p *corev1.Pod) (native, found bool) {
		for _, c := range p.Spec.InitContainers {
			if c.Name == "istio-proxy" {
				return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways, true
			}
		}
		for _, c := range p.Spec.Containers {
			if c.Name == "istio-proxy" {
				return false, true
			}
		}
		return false, false
	}
	attempt := 0
	expect := func(what string, want bool) {
		t.Helper()
		testutil.EventuallyNoError(t, 30*time.Second, what, func() error {
			attempt++
			p, err := cs.CoreV1().Pods(ns).Create(t.Context(), appPod(fmt.Sprintf("kubelet-%d", attempt), nil), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if native, found := nativeProxy(p); !found || native != want {
				return fmt.Errorf("pod %s: istio-proxy found %v, native %v; want native %v", p.Name, found, native, want)
			}
			return nil
		})
	}
	expect("no nodes: a native istio-proxy", true)

	node, err := cs.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kubelet-1-28"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	setKubelet := func(version string) {
		t.Helper()
		node.Status.NodeInfo.KubeletVersion = version
		updated, err := cs.CoreV1().Nodes().UpdateStatus(t.Context(), node, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("node status: %v", err)
		}
		node = updated
	}
	setKubelet("v1.28.9")
	expect("a 1.28 kubelet: istio-proxy as a container", false)
	setKubelet("v1.30.2")
	expect("every kubelet 1.29 or later again: a native istio-proxy", true)
}

// TestProxyConfigReachesInjection: ProxyConfig objects on the API server
// (mesh-wide in the root namespace, and the pod's namespace's) are merged
// into what a new pod is injected with, under the pod's own annotation,
// in Istio's order; the agent reads them from PROXY_CONFIG and its
// environment.
func TestProxyConfigReachesInjection(t *testing.T) {
	cs := env.Clientset()
	const cpNS = "istio-system"
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cpNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm := istioInjectorConfigMap(t, cpNS)
	if _, err := cs.CoreV1().ConfigMaps(cpNS).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap istio-sidecar-injector: %v", err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().ConfigMaps(cpNS).Delete(context.Background(), cm.Name, metav1.DeleteOptions{}) })
	srv, _ := setup(t)
	chartMutatingWebhook(t, "proxyconfig-e2e", srv.HTTPSListenAddr(), srv.Authority().Bundle().RootPEM)
	ns := fmt.Sprintf("proxyconfig-%d", time.Now().UnixNano()%1_000_000)
	namespace(t, cs, ns, map[string]string{"istio-injection": "enabled"})

	ic, err := istioclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	create := func(namespace, name string, concurrency int32, env map[string]string) {
		t.Helper()
		obj := &networkingv1beta1.ProxyConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: apinetworkingv1beta1.ProxyConfig{Concurrency: wrapperspb.Int32(concurrency), EnvironmentVariables: env}}
		if _, err := ic.NetworkingV1beta1().ProxyConfigs(namespace).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ProxyConfig %s/%s: %v", namespace, name, err)
		}
		t.Cleanup(func() {
			_ = ic.NetworkingV1beta1().ProxyConfigs(namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	create(cpNS, "mesh", 1, map[string]string{"MESH_WIDE": "on", "LEVEL": "mesh"})
	create(ns, "namespace", 3, map[string]string{"LEVEL": "namespace"})

	proxyEnv := func(p *corev1.Pod) map[string]string {
		out := map[string]string{}
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			if c.Name == "istio-proxy" {
				for _, e := range c.Env {
					out[e.Name] = e.Value
				}
			}
		}
		return out
	}
	attempt := 0
	testutil.EventuallyNoError(t, 30*time.Second, "a pod injected with both ProxyConfigs merged", func() error {
		attempt++
		pod := appPod(fmt.Sprintf("app-%d", attempt), nil)
		// The pod's annotation wins over every object.
		pod.Annotations = map[string]string{"proxy.istio.io/config": "proxyMetadata: {POD: annotated}"}
		p, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		env := proxyEnv(p)
		pc := &meshconfig.ProxyConfig{}
		if err := protojson.Unmarshal([]byte(env["PROXY_CONFIG"]), pc); err != nil {
			return fmt.Errorf("pod %s: PROXY_CONFIG %q: %w", p.Name, env["PROXY_CONFIG"], err)
		}
		if pc.GetConcurrency().GetValue() != 3 || env["LEVEL"] != "namespace" || env["MESH_WIDE"] != "on" || env["POD"] != "annotated" {
			return fmt.Errorf("pod %s: concurrency %d, env LEVEL=%q MESH_WIDE=%q POD=%q; want 3, namespace, on, annotated",
				p.Name, pc.GetConcurrency().GetValue(), env["LEVEL"], env["MESH_WIDE"], env["POD"])
		}
		return nil
	})
}
