package inject

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/injectfixture"
)

// chartInjector builds the injector from the chart's own templates
// (charts/meshpilot/files/inject), assembled as
// templates/injector-configmap.yaml does, with the values of Istio's
// fixtures (the chart passes values in Istio's layout).
func chartInjector(t testing.TB) *Injector {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "charts", "meshpilot", "files", "inject")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	common := read("common.tpl")
	raw := map[string]string{
		"sidecar":     common + read("sidecar.yaml"),
		"gateway":     common + read("gateway.yaml"),
		"grpc-agent":  common + read("grpc-agent.yaml"),
		"grpc-simple": read("grpc-simple.yaml"),
	}
	configYAML, err := yaml.Marshal(map[string]any{"defaultTemplates": []string{"sidecar"}, "templates": raw})
	if err != nil {
		t.Fatal(err)
	}
	data := injectfixture.ConfigMaps(t, fixtureRoot(t))
	cfg, err := ParseConfig(string(configYAML), data["istio-sidecar-injector"]["values"])
	if err != nil {
		t.Fatal(err)
	}
	mesh, err := ParseMesh(data["istio"]["mesh"])
	if err != nil {
		t.Fatal(err)
	}
	return New(cfg, mesh, "")
}

// hostileInputs are the observed inputs of issue 32 item 1 that changed the
// structure of the injected pod: an unquoted readiness value that adds pod
// fields, an interface list that breaks out of istio-init's args into a new
// container, and a proxyMetadata key whose newlines start a container.
var hostileInputs = []struct {
	name        string
	annotations map[string]string
	want        string // in the error
}{
	{"readiness", map[string]string{
		"readiness.status.sidecar.istio.io/periodSeconds": "15\n  hostPID: true\n  hostNetwork: true\n  securityContext:\n    runAsUser: 0\n    x:",
	}, "readiness.status.sidecar.istio.io/periodSeconds"},
	{"interfaces", map[string]string{
		"traffic.sidecar.istio.io/excludeInterfaces": "eth0\"\n  - name: evil\n    image: evil.example/x\n    command:\n    - \"x",
	}, "traffic.sidecar.istio.io/excludeInterfaces"},
	{"proxyMetadata key", map[string]string{
		"proxy.istio.io/config": `{"proxyMetadata": {"A\n    value: x\n  - name: evil\n    image: evil.example/x\n    env:\n    - name: B": "c"}}`,
	}, "proxyMetadata"},
}

// TestPodValuesCannotShapeThePod: each hostile input is refused with an
// error naming the annotation or field, with Istio's ConfigMap and with the
// chart's templates.
func TestPodValuesCannotShapeThePod(t *testing.T) {
	t.Parallel()
	for name, inj := range map[string]*Injector{"istio": fixtureInjector(t), "chart": chartInjector(t)} {
		for _, in := range hostileInputs {
			pod := helloPod(t)
			pod.Annotations = in.annotations
			got, err := admitPod(inj, pod, Options{})
			if err == nil {
				t.Errorf("%s templates, %s: injected (hostPID=%v hostNetwork=%v pod securityContext=%v containers=%v init=%v), want a refusal naming %s",
					name, in.name, got.Spec.HostPID, got.Spec.HostNetwork, got.Spec.SecurityContext != nil,
					names(got.Spec.Containers), names(got.Spec.InitContainers), in.want)
				continue
			}
			if !strings.Contains(err.Error(), in.want) || !strings.Contains(err.Error(), "hellopod") {
				t.Errorf("%s templates, %s: error %q, want one naming the pod and %s", name, in.name, err, in.want)
			}
		}
	}
}

// fuzzedAnnotations are annotations whose valid values change only values
// of the injected pod, never its structure, with a benign value each.
var fuzzedAnnotations = []struct{ key, benign string }{
	{"readiness.status.sidecar.istio.io/periodSeconds", "15"},
	{"readiness.status.sidecar.istio.io/initialDelaySeconds", "1"},
	{"readiness.status.sidecar.istio.io/failureThreshold", "4"},
	{"status.sidecar.istio.io/port", "15020"},
	{"traffic.sidecar.istio.io/includeOutboundIPRanges", "10.0.0.0/8"},
	{"traffic.sidecar.istio.io/excludeOutboundIPRanges", "10.1.0.0/16"},
	{"traffic.sidecar.istio.io/includeInboundPorts", "80"},
	{"traffic.sidecar.istio.io/excludeInboundPorts", "81"},
	{"traffic.sidecar.istio.io/includeOutboundPorts", "82"},
	{"traffic.sidecar.istio.io/excludeOutboundPorts", "83"},
	{"traffic.sidecar.istio.io/excludeInterfaces", "eth1"},
	{"traffic.sidecar.istio.io/kubevirtInterfaces", "net1"},
	{"sidecar.istio.io/agentLogLevel", "default:info"},
	{"sidecar.istio.io/logLevel", "debug"},
	{"sidecar.istio.io/componentLogLevel", "misc:error"},
	{"sidecar.istio.io/proxyCPU", "100m"},
	{"sidecar.istio.io/proxyMemoryLimit", "1Gi"},
	{"k8s.v1.cni.cncf.io/networks", "net1"},
}

// FuzzInjectAnnotations injects the hello pod with an arbitrary value for
// one annotation of fuzzedAnnotations, an arbitrary proxyMetadata entry
// (key prefixed FUZZ_ so it cannot name a variable the templates set) and
// an arbitrary version label, with Istio's ConfigMap and the chart's
// templates. Injection must be refused, or give a pod of the same shape
// (keys, objects, lists of objects) as the same pod with benign values:
// values may differ, structure may not.
func FuzzInjectAnnotations(f *testing.F) {
	injectors := []*Injector{fixtureInjector(f), chartInjector(f)}
	pod := helloPod(f)
	f.Add(uint8(0), hostileInputs[0].annotations["readiness.status.sidecar.istio.io/periodSeconds"], "K", "v", "v1")
	f.Add(uint8(10), hostileInputs[1].annotations["traffic.sidecar.istio.io/excludeInterfaces"], "K", "v", "v1")
	f.Add(uint8(1), "0", "A\n    value: x\n  - name: evil\n    image: evil.example/x\n    env:\n    - name: B", "c", "v1")
	f.Add(uint8(2), "3", "K", "x\\", "v1")
	f.Add(uint8(4), "10.0.0.0/8,\n", "K", "a\"\n  hostPID: true\n  x: \"", "")
	f.Add(uint8(7), "80\n", "K", "", "v1\n  hostPID: true")
	f.Add(uint8(17), "x'\n  hostPID: true\n  y: '", "K", "v", "v1")
	f.Fuzz(func(t *testing.T, which uint8, value, metaKey, metaValue, version string) {
		a := fuzzedAnnotations[int(which)%len(fuzzedAnnotations)]
		for _, inj := range injectors {
			hostile, err := injectWith(inj, pod, a.key, value, "FUZZ_"+metaKey, metaValue, version)
			if err != nil {
				continue
			}
			base := benign(value, a.benign)
			if n, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64); err == nil && n == 0 {
				// Zero is omitted from the pod's JSON, and status port 0
				// turns the agent's probes off: structure, legitimately.
				base = "0"
			}
			baseline, err := injectWith(inj, pod, a.key, base, "FUZZ_K", benign(metaValue, "v"), benign(version, "v1"))
			if err != nil {
				t.Fatalf("baseline: %v", err)
			}
			if got, want := shape(hostile), shape(baseline); !slices.Equal(got, want) {
				t.Errorf("%s=%q proxyMetadata %q=%q version=%q changed the pod's shape:\n%s",
					a.key, value, metaKey, metaValue, version, shapeDiff(got, want))
			}
		}
	})
}

// benign is def, or "" when v is empty (templates may test emptiness).
func benign(v, def string) string {
	if v == "" {
		return ""
	}
	return def
}

func injectWith(inj *Injector, pod *corev1.Pod, key, value, metaKey, metaValue, version string) (map[string]any, error) {
	pc, err := json.Marshal(map[string]any{"proxyMetadata": map[string]string{metaKey: metaValue}})
	if err != nil {
		return nil, err
	}
	p := pod.DeepCopy()
	p.Annotations = map[string]string{key: value, "proxy.istio.io/config": string(pc)}
	p.Labels = map[string]string{"app": "hello", "version": version}
	got, err := admitPod(inj, p, Options{})
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(got)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(raw, &m)
}

// shape lists the JSON pointers of v's objects, of its lists of objects
// (by index) and of its scalars that are not zero ("", 0, false, null:
// the API types omit them), without the scalars' values; lists of scalars
// (args, …) are one leaf.
func shape(v any) []string {
	var out []string
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case map[string]any:
			out = append(out, path+"{}")
			for k, e := range x {
				walk(e, path+"/"+escapePointer(k))
			}
		case []any:
			objects := false
			for _, e := range x {
				if _, ok := e.(map[string]any); ok {
					objects = true
				}
			}
			if !objects {
				if len(x) > 0 {
					out = append(out, path+"[scalars]")
				}
				return
			}
			for i, e := range x {
				walk(e, path+"/"+strconv.Itoa(i))
			}
		case nil:
		case string:
			if x != "" {
				out = append(out, path)
			}
		case float64:
			if x != 0 {
				out = append(out, path)
			}
		case bool:
			if x {
				out = append(out, path)
			}
		}
	}
	walk(v, "")
	slices.Sort(out)
	return out
}

func shapeDiff(got, want []string) string {
	var b strings.Builder
	for _, p := range got {
		if !slices.Contains(want, p) {
			fmt.Fprintf(&b, "+ %s\n", p)
		}
	}
	for _, p := range want {
		if !slices.Contains(got, p) {
			fmt.Fprintf(&b, "- %s\n", p)
		}
	}
	return b.String()
}

// TestDuplicateKeyRefused: a rendered document with a key twice is an
// injection failure (istiod keeps the last), whatever produced it: a
// hostile value in a template of a ConfigMap we have not seen, or the
// template itself.
func TestDuplicateKeyRefused(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig("templates:\n  sidecar: |\n    spec:\n      hostPID: false\n      hostPID: true\n", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, nil, "").Inject(helloPod(t), Options{})
	if err == nil || !strings.Contains(err.Error(), "hostPID") || !strings.Contains(err.Error(), "template sidecar output") {
		t.Fatalf("template output with hostPID twice: error %v, want one naming the template and the key", err)
	}
}
