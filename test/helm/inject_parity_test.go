package helm

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/injectfixture"
	"github.com/meshpilot/meshpilot/pilot/webhook/inject"
)

// TestChartTemplatesMatchIstio injects Istio's injector fixtures with the
// chart's own templates (rendered with the image and settings of the
// install that produced the fixtures) and compares with Istio's output.
// The chart's templates are written here, not copied, so any difference
// must be listed, with its reason, in testdata/chart-inject-exceptions.yaml.
func TestChartTemplatesMatchIstio(t *testing.T) {
	inj := chartInjector(t, "global.hub=registry.istio.io/testing", "global.tag=latest")
	inj.NativeSidecars = true
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{"istio-injection": "enabled"}}}
	injectfixture.Run(t, injectfixture.Dir(t), "testdata/chart-inject-exceptions.yaml", func(pod *corev1.Pod, o injectfixture.Owner) (*corev1.Pod, error) {
		var w *inject.Workload
		if !o.Pod {
			w = &inject.Workload{TypeMeta: metav1.TypeMeta{Kind: o.Kind, APIVersion: o.APIVersion}, Name: o.Name, Namespace: o.Namespace}
		}
		if !inj.Config().ShouldInject("", ns, pod) {
			return pod, nil
		}
		return inj.Inject(pod, inject.Options{Workload: w})
	})
}

// TestChartTemplateValues covers the chart values and pod annotations
// Istio's fixtures leave at their defaults: Istio CNI, holding the
// application until the proxy starts, NET_BIND_SERVICE, TPROXY, JSON logs,
// pull secrets and a disabled status port.
func TestChartTemplateValues(t *testing.T) {
	hello := func(annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hello", Labels: map[string]string{"app": "hello"}, Annotations: annotations},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "hello", Image: "hello", Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}},
		}
	}
	injectWith := func(t *testing.T, native bool, pod *corev1.Pod, sets ...string) *corev1.Pod {
		t.Helper()
		inj := chartInjector(t, sets...)
		inj.NativeSidecars = native
		got, err := inj.Inject(pod, inject.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	find := func(cs []corev1.Container, name string) *corev1.Container {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
		return nil
	}
	t.Run("cni", func(t *testing.T) {
		got := injectWith(t, false, hello(nil), "cni.enabled=true")
		v := find(got.Spec.InitContainers, "istio-validation")
		if v == nil || find(got.Spec.InitContainers, "istio-init") != nil {
			t.Fatalf("init containers %v, want istio-validation only", containerNames(got.Spec.InitContainers))
		}
		if !slices.Contains(v.Args, "--run-validation") || !slices.Contains(v.Args, "--skip-rule-apply") {
			t.Errorf("istio-validation args %v", v.Args)
		}
		if c := v.SecurityContext.Capabilities; len(c.Add) != 0 || *v.SecurityContext.RunAsUser != 1337 {
			t.Errorf("istio-validation runs with %v as %d, want no added capabilities, uid 1337", c.Add, *v.SecurityContext.RunAsUser)
		}
		if got.Annotations["sidecar.istio.io/interceptionMode"] != "REDIRECT" || got.Annotations["traffic.sidecar.istio.io/excludeInboundPorts"] != "15020" {
			t.Errorf("annotations for the CNI plugin: %v", got.Annotations)
		}
	})
	t.Run("hold application", func(t *testing.T) {
		got := injectWith(t, false, hello(nil), "global.proxy.holdApplicationUntilProxyStarts=true")
		if names := containerNames(got.Spec.Containers); !slices.Equal(names, []string{"istio-proxy", "hello"}) {
			t.Errorf("containers %v, want istio-proxy first", names)
		}
		p := find(got.Spec.Containers, "istio-proxy")
		if p.Lifecycle == nil || p.Lifecycle.PostStart == nil || !slices.Equal(p.Lifecycle.PostStart.Exec.Command, []string{"pilot-agent", "wait"}) {
			t.Errorf("istio-proxy lifecycle %+v, want postStart pilot-agent wait", p.Lifecycle)
		}
	})
	t.Run("native sidecar drains on stop", func(t *testing.T) {
		got := injectWith(t, true, hello(map[string]string{"status.sidecar.istio.io/port": "15555"}))
		p := find(got.Spec.InitContainers, "istio-proxy")
		if p == nil || p.Lifecycle == nil || p.Lifecycle.PreStop == nil ||
			!slices.Equal(p.Lifecycle.PreStop.Exec.Command, []string{"pilot-agent", "request", "--debug-port=15555", "POST", "drain"}) {
			t.Errorf("native istio-proxy %+v, want preStop drain on the status port", p)
		}
	})
	t.Run("tproxy and bind service", func(t *testing.T) {
		got := injectWith(t, false, hello(map[string]string{"sidecar.istio.io/interceptionMode": "TPROXY"}), "global.proxy.capNetBindService=true")
		p := find(got.Spec.Containers, "istio-proxy")
		sc := p.SecurityContext
		if *sc.RunAsUser != 0 || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_BIND_SERVICE"}) {
			t.Errorf("TPROXY istio-proxy runs as %d with %v, want root with NET_ADMIN, NET_BIND_SERVICE", *sc.RunAsUser, sc.Capabilities.Add)
		}
		init := find(got.Spec.InitContainers, "istio-init")
		if i := slices.Index(init.Args, "-m"); i < 0 || init.Args[i+1] != "TPROXY" {
			t.Errorf("istio-init args %v, want -m TPROXY", init.Args)
		}
	})
	t.Run("json logs, pull secrets, no status port", func(t *testing.T) {
		got := injectWith(t, false, hello(map[string]string{"status.sidecar.istio.io/port": "0"}),
			"global.logAsJson=true", "global.imagePullSecrets={regcred}")
		p := find(got.Spec.Containers, "istio-proxy")
		if !slices.Contains(p.Args, "--log_as_json") || !slices.Contains(find(got.Spec.InitContainers, "istio-init").Args, "--log_as_json") {
			t.Errorf("args %v, want --log_as_json", p.Args)
		}
		if p.ReadinessProbe != nil || p.StartupProbe != nil {
			t.Errorf("status port 0: probes %v %v, want none", p.ReadinessProbe, p.StartupProbe)
		}
		if len(got.Spec.ImagePullSecrets) != 1 || got.Spec.ImagePullSecrets[0].Name != "regcred" {
			t.Errorf("imagePullSecrets %v, want regcred", got.Spec.ImagePullSecrets)
		}
	})
}
