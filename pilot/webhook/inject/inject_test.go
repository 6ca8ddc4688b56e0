package inject

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

func TestParseConfigErrorsNameTheField(t *testing.T) {
	cases := []struct{ config, values, want string }{
		{"policy: sometimes", "", "field policy"},
		{"templates:\n  sidecar: '{{ .Foo '", "", "field templates.sidecar"},
		{"templates:\n  sidecar: '{{ nosuchfunc }}'", "", "field templates.sidecar"},
		{"neverInjectSelector:\n- matchExpressions:\n  - {key: a, operator: Bogus}", "", "field neverInjectSelector[0]"},
		{"policy: [", "", "key config"},
		{"policy: enabled", "{", "key values"},
	}
	for _, c := range cases {
		_, err := ParseConfig(c.config, c.values)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseConfig(%q, %q) error %v, want one naming %q", c.config, c.values, err, c.want)
		}
	}
	cfg, err := ParseConfig("templates: {sidecar: 'metadata: {}'}", "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy != PolicyEnabled || len(cfg.DefaultTemplates) != 1 || cfg.DefaultTemplates[0] != SidecarTemplate {
		t.Errorf("defaults: policy %q, defaultTemplates %v", cfg.Policy, cfg.DefaultTemplates)
	}
}

func TestParseMeshMergesDefaultConfig(t *testing.T) {
	mesh, err := ParseMesh("trustDomain: example.org\ndefaultConfig:\n  proxyMetadata: {A: b}\n  statusPort: 15555\n")
	if err != nil {
		t.Fatal(err)
	}
	pc := mesh.GetDefaultConfig()
	if mesh.GetTrustDomain() != "example.org" || pc.GetStatusPort() != 15555 ||
		pc.GetProxyMetadata()["A"] != "b" || pc.GetDiscoveryAddress() != "istiod.istio-system.svc:15012" {
		t.Errorf("mesh = %v", mesh)
	}
	if _, err := ParseMesh("defaultConfig: {noSuchField: 1}"); err == nil || !strings.Contains(err.Error(), "key mesh") {
		t.Errorf("unknown field: error %v", err)
	}
	if got := protoToJSON(DefaultProxyConfig()); got != "{}" {
		t.Errorf("protoToJSON(defaults) = %s, want {}", got)
	}
}

func helloPod(t testing.TB) *corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtureRoot(t), "cases", "pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := yaml.Unmarshal(raw, pod); err != nil {
		t.Fatal(err)
	}
	pod.Namespace = "apps"
	return pod
}

// TestReinjectionIsIdempotent injects an injected pod again: Istio strips
// what its status annotation names first, so nothing changes.
func TestReinjectionIsIdempotent(t *testing.T) {
	inj := fixtureInjector(t)
	once, err := inj.Inject(helloPod(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	twice, err := inj.Inject(once, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(once, twice); d != "" {
		t.Errorf("re-injection changed the pod (-once +twice):\n%s", d)
	}
}

func TestInjectProxyConfigAnnotationAndClusterEnv(t *testing.T) {
	inj := fixtureInjector(t)
	pod := helloPod(t)
	pod.Annotations = map[string]string{
		"proxy.istio.io/config":             "holdApplicationUntilProxyStarts: true\nproxyMetadata: {FOO: bar}",
		"sidecar.istio.io/nativeSidecar":    "false",
		"prometheus.io/port":                "9090",
		"traffic.sidecar.istio.io/excludeX": "kept",
	}
	got, err := inj.Inject(pod, Options{ProxyEnvs: map[string]string{"ISTIO_META_CLUSTER_ID": "east"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Containers) != 2 || got.Spec.Containers[0].Name != proxyContainer {
		t.Fatalf("containers %v: want istio-proxy first (holdApplicationUntilProxyStarts, no native sidecar)", names(got.Spec.Containers))
	}
	env := map[string]string{}
	for _, e := range got.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["FOO"] != "bar" || env["ISTIO_META_CLUSTER_ID"] != "east" {
		t.Errorf("proxy env FOO=%q ISTIO_META_CLUSTER_ID=%q", env["FOO"], env["ISTIO_META_CLUSTER_ID"])
	}
	if env["ISTIO_PROMETHEUS_ANNOTATIONS"] != `{"scrape":"","path":"","port":"9090"}` {
		t.Errorf("ISTIO_PROMETHEUS_ANNOTATIONS = %q", env["ISTIO_PROMETHEUS_ANNOTATIONS"])
	}
	if got.Annotations["prometheus.io/port"] != "15020" {
		t.Errorf("prometheus.io/port = %q, want the agent's 15020", got.Annotations["prometheus.io/port"])
	}
	if !strings.Contains(env["PROXY_CONFIG"], `"holdApplicationUntilProxyStarts":true`) {
		t.Errorf("PROXY_CONFIG = %q", env["PROXY_CONFIG"])
	}
}

func TestInjectErrorsNameThePod(t *testing.T) {
	inj := fixtureInjector(t)
	for anno, want := range map[string]string{
		"traffic.sidecar.istio.io/includeOutboundIPRanges": "includeOutboundIPRanges",
		"inject.istio.io/templates":                        "template \"bogus\" not found",
		"proxy.istio.io/config":                            "proxy.istio.io/config",
	} {
		pod := helloPod(t)
		pod.Annotations = map[string]string{anno: "bogus"}
		_, err := inj.Inject(pod, Options{})
		if err == nil || !strings.Contains(err.Error(), "apps/hellopod") || !strings.Contains(err.Error(), want) {
			t.Errorf("annotation %s: error %v, want one naming apps/hellopod and %q", anno, err, want)
		}
	}
}

func TestAdmit(t *testing.T) {
	inj := fixtureInjector(t)
	pod := helloPod(t)
	pod.Namespace = ""
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	req := &admissionv1.AdmissionRequest{UID: "u", Namespace: "apps", Object: runtime.RawExtension{Raw: raw},
		Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}}

	// Namespace not labeled for injection: allowed, no patch.
	resp := inj.Admit(req, Options{Namespace: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}})
	if !resp.Allowed || resp.Patch != nil || resp.UID != "u" {
		t.Errorf("unlabeled namespace: %+v", resp)
	}
	// Labeled: a JSONPatch that adds the proxy.
	resp = inj.Admit(req, Options{Namespace: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "apps", Labels: map[string]string{"istio-injection": "enabled"}}}})
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("labeled namespace: %+v", resp)
	}
	patched, err := applyPatch(raw, resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(patched, out); err != nil {
		t.Fatal(err)
	}
	// The namespace comes from the request; the API server sets it, so the
	// patch does not.
	if findContainer(proxyContainer, out.Spec.InitContainers) == nil || out.Namespace != "" {
		t.Errorf("patched pod: init containers %v, namespace %q", names(out.Spec.InitContainers), out.Namespace)
	}
	var owner string
	for _, e := range findContainer(proxyContainer, out.Spec.InitContainers).Env {
		if e.Name == "ISTIO_META_OWNER" {
			owner = e.Value
		}
	}
	if owner != "kubernetes://apis/v1/namespaces/apps/pods/hellopod" {
		t.Errorf("ISTIO_META_OWNER = %q", owner)
	}
	// Not a pod: refused with the reason.
	bad := *req
	bad.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	if resp := inj.Admit(&bad, Options{}); resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "want core/v1 Pod") {
		t.Errorf("deployment: %+v", resp)
	}
}

func TestCreatePatch(t *testing.T) {
	from := `{"a":{"b/c":1,"gone":true,"list":[1,2],"same":[{"x":1}]},"n":null}`
	to := `{"a":{"b/c":2,"list":[1,2,3],"same":[{"x":1,"y":"z"}],"new":{"k":false}},"n":null}`
	patch, err := createPatch(context.Background(), []byte(from), []byte(to))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"remove","path":"/a/gone"},{"op":"replace","path":"/a/b~1c","value":2},` +
		`{"op":"replace","path":"/a/list","value":[1,2,3]},{"op":"add","path":"/a/new","value":{"k":false}},` +
		`{"op":"add","path":"/a/same/0/y","value":"z"}]`
	var gotOps, wantOps []operation
	if err := json.Unmarshal(patch, &gotOps); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &wantOps); err != nil {
		t.Fatal(err)
	}
	// order of ops within an object: removals first, then keys in order.
	if d := cmp.Diff(wantOps, gotOps); d != "" {
		t.Errorf("patch (-want +got):\n%s", d)
	}
	applied, err := applyPatch([]byte(from), patch)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal(applied, &a)
	_ = json.Unmarshal([]byte(to), &b)
	if d := cmp.Diff(b, a); d != "" {
		t.Errorf("applied patch (-want +got):\n%s", d)
	}
}

func TestDeployMeta(t *testing.T) {
	ctrl := true
	pod := func(kind, owner string, l map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x-abc", GenerateName: "x-", Namespace: "ns", Labels: l,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner, Controller: &ctrl}}}}
	}
	cases := []struct {
		pod        *corev1.Pod
		kind, name string
	}{
		{pod("ReplicaSet", "web-5d9c", map[string]string{"pod-template-hash": "5d9c"}), "Deployment", "web"},
		{pod("ReplicaSet", "web-5d9c", nil), "ReplicaSet", "web-5d9c"},
		{pod("ReplicationController", "dc-1", map[string]string{"deploymentconfig": "dc"}), "DeploymentConfig", "dc"},
		{pod("Job", "nightly-28000000", nil), "CronJob", "nightly"},
		{pod("Job", "once", nil), "Job", "once"},
		{pod("StatefulSet", "db", nil), "StatefulSet", "db"},
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "solo"}}, "Pod", "solo"},
	}
	for _, c := range cases {
		w := deployMeta(c.pod)
		if w.Kind != c.kind || w.Name != c.name {
			t.Errorf("deployMeta(%v) = %s %s, want %s %s", c.pod.OwnerReferences, w.Kind, w.Name, c.kind, c.name)
		}
	}
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// BenchmarkInject is one AdmissionReview for the hello Pod, end to end:
// decode, selection, template rendering, merge, post-processing, JSONPatch.
func BenchmarkInject(b *testing.B) {
	inj := fixtureInjector(b)
	pod := helloPod(b)
	raw, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	review := &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u", Namespace: "apps", Object: runtime.RawExtension{Raw: raw},
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}},
	}
	body, err := json.Marshal(review)
	if err != nil {
		b.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps", Labels: map[string]string{"istio-injection": "enabled"}}}
	b.ReportAllocs()
	for b.Loop() {
		in := &admissionv1.AdmissionReview{}
		if err := json.Unmarshal(body, in); err != nil {
			b.Fatal(err)
		}
		out := inj.AdmitReview(in, Options{Namespace: ns})
		if out.Response == nil || len(out.Response.Patch) == 0 {
			b.Fatalf("no patch: %+v", out.Response)
		}
		if _, err := json.Marshal(out); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPodTemplatesRender runs every template of the ConfigMap meant for
// pods (the others, waypoint and kube-gateway…, belong to the gateway
// deployment controller and take other inputs).
func TestPodTemplatesRender(t *testing.T) {
	inj := fixtureInjector(t)
	for _, name := range []string{"sidecar", "gateway", "grpc-simple", "grpc-agent"} {
		pod := helloPod(t)
		pod.Annotations = map[string]string{"inject.istio.io/templates": name}
		if name == "gateway" {
			pod.Spec.Containers = []corev1.Container{{Name: proxyContainer, Image: "auto"}}
		}
		got, err := inj.Inject(pod, Options{})
		if err != nil {
			t.Errorf("template %s: %v", name, err)
			continue
		}
		if findContainerInPod(proxyContainer, got) == nil && name != "grpc-simple" {
			t.Errorf("template %s: no istio-proxy in %v / %v", name, names(got.Spec.InitContainers), names(got.Spec.Containers))
		}
		if name == "gateway" {
			if c := findContainerInPod(proxyContainer, got); c == nil || c.Image != "registry.istio.io/testing/proxyv2:latest" {
				t.Errorf("gateway: image auto not replaced: %+v", c)
			}
		}
	}
}

func TestOpenShiftProxyIDs(t *testing.T) {
	inj := fixtureInjector(t)
	inj.OpenShift = true
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps", Annotations: map[string]string{
		"openshift.io/sa.scc.uid-range":           "1000620000/10000",
		"openshift.io/sa.scc.supplemental-groups": "1000620000-1000629000,5/2",
	}}}
	got, err := inj.Inject(helloPod(t), Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	sc := findContainerInPod(proxyContainer, got).SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 1000629999 || sc.RunAsGroup == nil || *sc.RunAsGroup != 1000629000 {
		t.Errorf("proxy securityContext %+v, want uid 1000629999 gid 1000629000", sc)
	}
	for _, c := range []struct {
		in         string
		start, end int64
		ok         bool
	}{{"10/5", 10, 14, true}, {"7-9", 7, 9, true}, {"x", 0, 0, false}, {"1/0", 0, 0, false}} {
		s, e, err := parseIDBlock(c.in)
		if (err == nil) != c.ok || s != c.start || e != c.end {
			t.Errorf("parseIDBlock(%q) = %d, %d, %v", c.in, s, e, err)
		}
	}
}
