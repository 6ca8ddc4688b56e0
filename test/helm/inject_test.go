package helm

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pilot/webhook/inject"
)

// The chart's istio-sidecar-injector ConfigMap, run by the injection engine
// on Bookinfo's pods: the pods Istio's agent expects, from Istio's proxyv2
// image by default and from meshpilot's agent image on request.

var (
	wantInitArgs = []string{"istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337", "-m", "REDIRECT",
		"-i", "*", "-x", "", "-b", "*", "-d", "15090,15021,15020", "--log_output_level=default:info"}
	wantProxyArgs = []string{"proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local",
		"--proxyLogLevel=warning", "--proxyComponentLogLevel=misc:error", "--log_output_level=default:info"}
	wantProxyEnv = []string{"PILOT_CERT_PROVIDER", "CA_ADDR", "POD_NAME", "POD_NAMESPACE", "INSTANCE_IP",
		"SERVICE_ACCOUNT", "HOST_IP", "ISTIO_CPU_LIMIT", "PROXY_CONFIG", "ISTIO_META_POD_PORTS",
		"ISTIO_META_APP_CONTAINERS", "ISTIO_META_CLUSTER_ID", "ISTIO_META_NODE_NAME",
		"ISTIO_META_INTERCEPTION_MODE", "ISTIO_META_WORKLOAD_NAME", "ISTIO_META_OWNER", "ISTIO_META_MESH_ID",
		"TRUST_DOMAIN"}
	wantVolumes = []string{"workload-socket", "credential-socket", "workload-certs", "istio-envoy", "istio-data",
		"istio-podinfo", "istio-token", "istiod-ca-cert"}
)

// chartInjector builds the injection engine from the chart's two ConfigMaps
// rendered with sets.
func chartInjector(t *testing.T, sets ...string) *inject.Injector {
	t.Helper()
	objs := render(t, sets...)
	cm := named[*corev1.ConfigMap](t, objs, "istio-sidecar-injector")
	cfg, err := inject.ParseConfig(cm.Data["config"], cm.Data["values"])
	if err != nil {
		t.Fatalf("ConfigMap istio-sidecar-injector: %v", err)
	}
	if cfg.Policy != inject.PolicyEnabled || !slices.Equal(cfg.DefaultTemplates, []string{"sidecar"}) {
		t.Errorf("policy %q defaultTemplates %v, want enabled [sidecar]", cfg.Policy, cfg.DefaultTemplates)
	}
	for _, name := range []string{"sidecar", "gateway", "grpc-agent", "grpc-simple"} {
		if cfg.Templates[name] == nil {
			t.Errorf("template %q missing", name)
		}
	}
	mesh, err := inject.ParseMesh(named[*corev1.ConfigMap](t, objs, "istio").Data["mesh"])
	if err != nil {
		t.Fatalf("ConfigMap istio: %v", err)
	}
	return inject.New(cfg, mesh, "")
}

// bookinfoDeployments are the Deployments of Istio's Bookinfo sample.
func bookinfoDeployments(t *testing.T) []*appsv1.Deployment {
	t.Helper()
	raw, err := os.ReadFile(fixtures.Shared(t, "bookinfo-kube/bookinfo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(string(raw))
	if err != nil {
		t.Fatalf("bookinfo.yaml: %v", err)
	}
	deps := all[*appsv1.Deployment](objs)
	if len(deps) == 0 {
		t.Fatal("bookinfo.yaml has no Deployment")
	}
	return deps
}

func TestInjectorConfigMapInjectsBookinfo(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bookinfo", Labels: map[string]string{"istio-injection": "enabled"}}}
	for _, tc := range []struct {
		name   string
		sets   []string
		native bool
		// nativeAnnotation is the pods' sidecar.istio.io/nativeSidecar,
		// which wins over native ("" leaves it unset).
		nativeAnnotation string
		wantNative       bool
		image            string
	}{
		{"proxyv2", nil, true, "", true, "docker.io/istio/proxyv2:1.31.1"},
		{"proxyv2 without native sidecars", nil, false, "", false, "docker.io/istio/proxyv2:1.31.1"},
		{"pods opt out of native sidecars", nil, true, "false", false, "docker.io/istio/proxyv2:1.31.1"},
		{"pods opt in to native sidecars", nil, false, "true", true, "docker.io/istio/proxyv2:1.31.1"},
		{"meshpilot agent", []string{"sidecarInjector.agentImage=meshpilot"}, true, "", true, "ghcr.io/meshpilot/pilot-agent:0.1.0-dev"},
		{"meshpilot agent tagged", []string{"sidecarInjector.agentImage=meshpilot", "image.hub=registry.example/mesh", "image.tag=1.2.3"},
			true, "", true, "registry.example/mesh/pilot-agent:1.2.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj := chartInjector(t, tc.sets...)
			inj.NativeSidecars = tc.native
			for _, dep := range bookinfoDeployments(t) {
				pod := &corev1.Pod{ObjectMeta: *dep.Spec.Template.ObjectMeta.DeepCopy(), Spec: *dep.Spec.Template.Spec.DeepCopy()}
				pod.Namespace = ns.Name
				if tc.nativeAnnotation != "" {
					if pod.Annotations == nil {
						pod.Annotations = map[string]string{}
					}
					pod.Annotations["sidecar.istio.io/nativeSidecar"] = tc.nativeAnnotation
				}
				if !inj.Config().ShouldInject("", ns, pod) {
					t.Fatalf("%s: not selected for injection in a namespace labelled istio-injection=enabled", dep.Name)
				}
				got, err := inj.Inject(pod, inject.Options{Namespace: ns, Workload: &inject.Workload{
					TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, Name: dep.Name, Namespace: ns.Name}})
				if err != nil {
					t.Fatalf("inject %s: %v", dep.Name, err)
				}
				checkInjected(t, dep, got, tc.wantNative, tc.image)
			}
		})
	}
}

// checkInjected is the structural check of one injected Bookinfo pod.
func checkInjected(t *testing.T, dep *appsv1.Deployment, pod *corev1.Pod, native bool, image string) {
	t.Helper()
	name := dep.Name
	if len(pod.Spec.InitContainers) == 0 || pod.Spec.InitContainers[0].Name != "istio-init" {
		t.Fatalf("%s: istio-init is not the first init container: %v", name, containerNames(pod.Spec.InitContainers))
	}
	initC := pod.Spec.InitContainers[0]
	if initC.Image != image {
		t.Errorf("%s: istio-init image %q, want %q", name, initC.Image, image)
	}
	if diff := cmp.Diff(wantInitArgs, initC.Args); diff != "" {
		t.Errorf("%s: istio-init args (-want +got):\n%s", name, diff)
	}
	if sc := initC.SecurityContext; sc == nil || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) {
		t.Errorf("%s: istio-init capabilities %+v, want NET_ADMIN NET_RAW", name, initC.SecurityContext)
	}

	proxies, where := pod.Spec.Containers, "containers"
	if native {
		proxies, where = pod.Spec.InitContainers, "initContainers"
	}
	var proxy *corev1.Container
	for i := range proxies {
		if proxies[i].Name == "istio-proxy" {
			proxy = &proxies[i]
		}
	}
	if proxy == nil {
		t.Fatalf("%s: no istio-proxy in %s (init %v, containers %v)", name, where,
			containerNames(pod.Spec.InitContainers), containerNames(pod.Spec.Containers))
	}
	if native && (proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
		t.Errorf("%s: native istio-proxy restartPolicy %v, want Always", name, proxy.RestartPolicy)
	}
	if proxy.Image != image {
		t.Errorf("%s: istio-proxy image %q, want %q", name, proxy.Image, image)
	}
	if diff := cmp.Diff(wantProxyArgs, proxy.Args); diff != "" {
		t.Errorf("%s: istio-proxy args (-want +got):\n%s", name, diff)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range proxy.Env {
		env[e.Name] = e
	}
	for _, n := range wantProxyEnv {
		if _, ok := env[n]; !ok {
			t.Errorf("%s: istio-proxy env %s missing", name, n)
		}
	}
	apps := dep.Spec.Template.Spec.Containers
	var appNames []string
	var appPorts []corev1.ContainerPort
	for _, c := range apps {
		appNames = append(appNames, c.Name)
		appPorts = append(appPorts, c.Ports...)
	}
	var gotPorts []corev1.ContainerPort
	if err := json.Unmarshal([]byte(env["ISTIO_META_POD_PORTS"].Value), &gotPorts); err != nil {
		t.Errorf("%s: ISTIO_META_POD_PORTS %q: %v", name, env["ISTIO_META_POD_PORTS"].Value, err)
	}
	if diff := cmp.Diff(appPorts, gotPorts); diff != "" {
		t.Errorf("%s: ISTIO_META_POD_PORTS (-want +got):\n%s", name, diff)
	}
	for k, want := range map[string]string{
		"ISTIO_META_APP_CONTAINERS":    strings.Join(appNames, ","),
		"CA_ADDR":                      "istiod.istio-system.svc:15012",
		"ISTIO_META_WORKLOAD_NAME":     dep.Name,
		"ISTIO_META_OWNER":             "kubernetes://apis/apps/v1/namespaces/bookinfo/deployments/" + dep.Name,
		"ISTIO_META_INTERCEPTION_MODE": "REDIRECT",
		"ISTIO_META_CLUSTER_ID":        "Kubernetes",
		"ISTIO_META_MESH_ID":           "cluster.local",
		"TRUST_DOMAIN":                 "cluster.local",
		"PILOT_CERT_PROVIDER":          "istiod",
	} {
		if got := env[k].Value; got != want {
			t.Errorf("%s: istio-proxy env %s=%q, want %q", name, k, got, want)
		}
	}
	if !slices.ContainsFunc(proxy.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == "http-envoy-prom" && p.ContainerPort == 15090
	}) {
		t.Errorf("%s: istio-proxy ports %+v lack http-envoy-prom 15090", name, proxy.Ports)
	}
	if rp := proxy.ReadinessProbe; rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/healthz/ready" ||
		rp.HTTPGet.Port != intstr.FromInt32(15021) {
		t.Errorf("%s: istio-proxy readinessProbe %+v, want /healthz/ready on 15021", name, proxy.ReadinessProbe)
	}
	if sc := proxy.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 1337 ||
		sc.RunAsGroup == nil || *sc.RunAsGroup != 1337 {
		t.Errorf("%s: istio-proxy securityContext %+v, want uid/gid 1337", name, proxy.SecurityContext)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]bool{}
	for _, m := range proxy.VolumeMounts {
		mounts[m.Name] = true
	}
	for _, v := range wantVolumes {
		if _, ok := vols[v]; !ok {
			t.Errorf("%s: volume %s missing", name, v)
		}
		if !mounts[v] {
			t.Errorf("%s: istio-proxy does not mount %s", name, v)
		}
	}
	if tok := vols["istio-token"].Projected; tok == nil || len(tok.Sources) != 1 ||
		tok.Sources[0].ServiceAccountToken == nil || tok.Sources[0].ServiceAccountToken.Audience != "istio-ca" {
		t.Errorf("%s: istio-token %+v, want a projected token for audience istio-ca", name, vols["istio-token"])
	}
	if cm := vols["istiod-ca-cert"].ConfigMap; cm == nil || cm.Name != "istio-ca-root-cert" {
		t.Errorf("%s: istiod-ca-cert %+v, want ConfigMap istio-ca-root-cert", name, vols["istiod-ca-cert"])
	}
	if pi := vols["istio-podinfo"].DownwardAPI; pi == nil || len(pi.Items) != 2 {
		t.Errorf("%s: istio-podinfo %+v, want labels and annotations from the downward API", name, vols["istio-podinfo"])
	}
	for _, c := range apps {
		if !slices.Contains(containerNames(pod.Spec.Containers), c.Name) {
			t.Errorf("%s: application container %s lost", name, c.Name)
		}
	}
	if pod.Labels["security.istio.io/tlsMode"] != "istio" || pod.Labels["service.istio.io/canonical-name"] == "" {
		t.Errorf("%s: labels %v lack security.istio.io/tlsMode and service.istio.io/canonical-name", name, pod.Labels)
	}
}

func TestInjectorConfigMapGatewayTemplate(t *testing.T) {
	inj := chartInjector(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: "gw", Labels: map[string]string{"app": "ingress"},
			Annotations: map[string]string{"inject.istio.io/templates": "gateway"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "istio-proxy", Image: "auto"}}},
	}
	got, err := inj.Inject(pod, inject.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.InitContainers) != 0 {
		t.Errorf("gateway got init containers %v, want none", containerNames(got.Spec.InitContainers))
	}
	if len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Name != "istio-proxy" {
		t.Fatalf("gateway containers %v, want [istio-proxy]", containerNames(got.Spec.Containers))
	}
	c := got.Spec.Containers[0]
	if c.Image != "docker.io/istio/proxyv2:1.31.1" || len(c.Args) < 2 || c.Args[1] != "router" {
		t.Errorf("gateway istio-proxy image %q args %v, want proxyv2 running proxy router", c.Image, c.Args)
	}
}

// TestInjectorConfigMapGRPCSimpleBootstrap runs the grpc-simple template's
// init container script with a real shell: it must write a gRPC xDS
// bootstrap naming the control plane's plaintext port and the pod's node ID.
func TestInjectorConfigMapGRPCSimpleBootstrap(t *testing.T) {
	inj := chartInjector(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Labels: map[string]string{"app": "echo"},
			Annotations: map[string]string{"inject.istio.io/templates": "grpc-simple"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: "echo"}}},
	}
	got, err := inj.Inject(pod, inject.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.InitContainers) != 1 || len(got.Spec.Containers) != 1 {
		t.Fatalf("init containers %v, containers %v", containerNames(got.Spec.InitContainers), containerNames(got.Spec.Containers))
	}
	init, app := got.Spec.InitContainers[0], got.Spec.Containers[0]
	if env := app.Env; len(env) == 0 || env[0].Name != "GRPC_XDS_BOOTSTRAP" || env[0].Value != "/var/lib/grpc/data/bootstrap.json" {
		t.Errorf("application env %v, want GRPC_XDS_BOOTSTRAP first", env)
	}
	if len(init.Command) != 3 || init.Command[0] != "sh" {
		t.Fatalf("init command %q, want sh -c SCRIPT", init.Command)
	}
	dir := t.TempDir()
	script := strings.ReplaceAll(init.Command[2], "/var/lib/grpc/data/", dir+"/")
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"INSTANCE_IP=10.1.2.3", "POD_NAME=echo-1", "POD_NAMESPACE=apps"}
	for _, e := range init.Env {
		if e.ValueFrom == nil {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bootstrap script: %v: %s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	var boot struct {
		XDSServers []struct {
			ServerURI string `json:"server_uri"`
		} `json:"xds_servers"`
		Node struct {
			ID       string            `json:"id"`
			Metadata map[string]string `json:"metadata"`
		} `json:"node"`
	}
	if err := json.Unmarshal(raw, &boot); err != nil {
		t.Fatalf("bootstrap.json is not JSON: %v\n%s", err, raw)
	}
	if len(boot.XDSServers) != 1 || boot.XDSServers[0].ServerURI != "dns:///istiod.istio-system.svc:15010" {
		t.Errorf("xds_servers %+v, want dns:///istiod.istio-system.svc:15010", boot.XDSServers)
	}
	if boot.Node.ID != "sidecar~10.1.2.3~echo-1.apps~cluster.local" || boot.Node.Metadata["GENERATOR"] != "grpc" {
		t.Errorf("node %+v, want sidecar~10.1.2.3~echo-1.apps~cluster.local with GENERATOR grpc", boot.Node)
	}
}

func containerNames(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestAgentImageValueChecked(t *testing.T) {
	_, err := tryHelm(t, "template", releaseName, chartDir(t), "--namespace", releaseNS,
		"--kube-version", kubetest.KubeVersion, "--set", "sidecarInjector.agentImage=envoy")
	if err == nil || !strings.Contains(err.Error(), "sidecarInjector.agentImage must be proxyv2 or meshpilot") {
		t.Errorf("helm template with agentImage=envoy: %v, want the value rejected", err)
	}
}
