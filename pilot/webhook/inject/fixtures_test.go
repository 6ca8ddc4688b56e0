package inject

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// fixtureDir holds Istio's own injector fixtures (see its README.md).
const fixtureDir = "../../../../shared/testdata/istio-inject"

// fixtureRoot finds the fixtures: /work/shared from the repository's usual
// place, or $ISTIO_INJECT_FIXTURES.
func fixtureRoot(t testing.TB) string {
	t.Helper()
	for _, d := range []string{os.Getenv("ISTIO_INJECT_FIXTURES"), "/work/shared/testdata/istio-inject", fixtureDir} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "configmaps.yaml")); err == nil {
			return d
		}
	}
	t.Fatalf("Istio injection fixtures not found (set ISTIO_INJECT_FIXTURES)")
	return ""
}

// fixtureInjector builds the injector from the fixtures' ConfigMaps, with
// the settings of Istio's kube-inject golden test: revision "" and native
// sidecars.
func fixtureInjector(t testing.TB) *Injector {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtureRoot(t), "configmaps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]map[string]string{}
	for _, doc := range splitYAML(string(raw)) {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
			t.Fatalf("configmaps.yaml: %v", err)
		}
		data[cm.Name] = cm.Data
	}
	cfg, err := ParseConfig(data["istio-sidecar-injector"]["config"], data["istio-sidecar-injector"]["values"])
	if err != nil {
		t.Fatal(err)
	}
	mesh, err := ParseMesh(data["istio"]["mesh"])
	if err != nil {
		t.Fatal(err)
	}
	return New(cfg, mesh, "")
}

func splitYAML(s string) []string {
	var docs []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

// commonCases run first; every other case of the directory follows.
func commonCases() []string {
	return []string{
		"hello", "frontend", "pod", "list", "hello-probes", "multi-container",
		"status_annotations", "traffic-annotations-empty-includes", "traffic-params-empty-includes",
	}
}

func fixtureCases(t *testing.T, root string) []string {
	entries, err := os.ReadDir(filepath.Join(root, "cases"))
	if err != nil {
		t.Fatal(err)
	}
	cases := commonCases()
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c] = true
	}
	var rest []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".yaml")
		if ok && !seen[name] {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	return append(cases, rest...)
}

type exception struct {
	Case   string `json:"case"`
	Reason string `json:"reason"`
}

func loadExceptions(t *testing.T) map[string]string {
	raw, err := os.ReadFile("testdata/exceptions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var list []exception
	if err := yaml.UnmarshalStrict(raw, &list); err != nil {
		t.Fatalf("testdata/exceptions.yaml: %v", err)
	}
	out := map[string]string{}
	for _, e := range list {
		if e.Case == "" || strings.TrimSpace(e.Reason) == "" {
			t.Fatalf("testdata/exceptions.yaml: entry %+v needs case and reason", e)
		}
		out[e.Case] = e.Reason
	}
	return out
}

// TestFixtures injects every workload of Istio's fixtures through Admit
// (AdmissionRequest → JSONPatch → patched pod) and compares the result with
// Istio's output semantically. Cases in testdata/exceptions.yaml must fail
// and all others pass, so the list cannot go stale.
func TestFixtures(t *testing.T) {
	root := fixtureRoot(t)
	inj := fixtureInjector(t)
	exceptions := loadExceptions(t)
	cases := fixtureCases(t, root)
	known := map[string]bool{}
	for _, c := range cases {
		known[c] = true
	}
	for c := range exceptions {
		if !known[c] {
			t.Errorf("testdata/exceptions.yaml names unknown case %q", c)
		}
	}
	if len(cases) != 36 {
		t.Errorf("found %d cases, want Istio's 36", len(cases))
	}
	for _, name := range cases {
		t.Run(name, func(t *testing.T) {
			problem := runFixture(t, inj, root, name)
			reason, excepted := exceptions[name]
			switch {
			case excepted && problem == "":
				t.Errorf("case passes now; remove it from testdata/exceptions.yaml (reason was: %s)", reason)
			case excepted:
				t.Logf("excepted (%s)", reason)
			case problem != "":
				t.Error(problem)
			}
		})
	}
}

// runFixture returns "" when the case matches, else what differs.
func runFixture(t *testing.T, inj *Injector, root, name string) string {
	in, err := os.ReadFile(filepath.Join(root, "cases", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(root, "cases", name+".yaml.injected"))
	if err != nil {
		t.Fatal(err)
	}
	inDocs, wantDocs := splitYAML(string(in)), splitYAML(string(want))
	if len(inDocs) != len(wantDocs) {
		return fmt.Sprintf("%d input documents, %d expected", len(inDocs), len(wantDocs))
	}
	var problems []string
	for i := range inDocs {
		var doc, exp map[string]any
		if err := yaml.Unmarshal([]byte(inDocs[i]), &doc); err != nil {
			t.Fatalf("input document %d: %v", i, err)
		}
		if err := yaml.Unmarshal([]byte(wantDocs[i]), &exp); err != nil {
			t.Fatalf("expected document %d: %v", i, err)
		}
		got, err := injectObject(inj, doc)
		if err != nil {
			problems = append(problems, fmt.Sprintf("document %d: %v", i, err))
			continue
		}
		if d := cmp.Diff(normalizeObject(t, exp), normalizeObject(t, got)); d != "" {
			problems = append(problems, fmt.Sprintf("document %d (-want +got):\n%s", i, d))
		}
	}
	return strings.Join(problems, "\n")
}

// injectObject injects an object's pod template as Istio's kube-inject does
// (a List's items one by one; objects without a pod template unchanged).
func injectObject(inj *Injector, obj map[string]any) (map[string]any, error) {
	kind, _ := obj["kind"].(string)
	apiVersion, _ := obj["apiVersion"].(string)
	meta, _ := obj["metadata"].(map[string]any)
	if kind == "List" {
		items, _ := obj["items"].([]any)
		for i, it := range items {
			m, ok := it.(map[string]any)
			if !ok {
				continue
			}
			out, err := injectObject(inj, m)
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i, err)
			}
			items[i] = out
		}
		return obj, nil
	}
	var tmpl map[string]any
	if kind == "Pod" {
		tmpl = obj
	} else if spec, ok := obj["spec"].(map[string]any); ok {
		tmpl, _ = spec["template"].(map[string]any)
	}
	if tmpl == nil {
		return obj, nil
	}
	pod := &corev1.Pod{}
	if err := convert(map[string]any{"metadata": tmpl["metadata"], "spec": tmpl["spec"]}, pod); err != nil {
		return nil, err
	}
	w := &Workload{TypeMeta: metav1.TypeMeta{Kind: kind, APIVersion: apiVersion}}
	w.Name, _ = meta["name"].(string)
	w.Namespace, _ = meta["namespace"].(string)
	if kind == "Pod" {
		d := deployMeta(pod)
		w = &d
	}
	injected, err := admitPod(inj, pod, Options{Workload: w})
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := convert(injected, &m); err != nil {
		return nil, err
	}
	tmpl["metadata"], tmpl["spec"] = m["metadata"], m["spec"]
	return obj, nil
}

// admitPod runs pod through Admit and applies the returned JSONPatch.
func admitPod(inj *Injector, pod *corev1.Pod, opts Options) (*corev1.Pod, error) {
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	req := &admissionv1.AdmissionRequest{
		UID:    "uid-1",
		Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Object: runtime.RawExtension{Raw: raw},
	}
	resp := inj.Admit(req, opts)
	if !resp.Allowed {
		return nil, fmt.Errorf("not allowed: %v", resp.Result)
	}
	if resp.UID != req.UID {
		return nil, fmt.Errorf("response UID %q, want %q", resp.UID, req.UID)
	}
	if resp.Patch == nil {
		return pod, nil
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		return nil, fmt.Errorf("patch type %v, want JSONPatch", resp.PatchType)
	}
	patched, err := applyPatch(raw, resp.Patch)
	if err != nil {
		return nil, err
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(patched, out); err != nil {
		return nil, err
	}
	return out, nil
}

func convert(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// normalizeObject makes Istio's output and ours comparable: pod templates
// (and Pods) go through the typed Pod so that serialization defaults
// (creationTimestamp: null, resources: {}) agree, the status annotation is
// parsed, and elsewhere empty maps and nulls (strategy: {}, status: {}) are
// dropped.
func normalizeObject(t *testing.T, obj map[string]any) map[string]any {
	kind, _ := obj["kind"].(string)
	out := map[string]any{}
	for k, v := range obj {
		out[k] = v
	}
	switch {
	case kind == "List":
		items, _ := obj["items"].([]any)
		var norm []any
		for _, it := range items {
			if m, ok := it.(map[string]any); ok {
				norm = append(norm, normalizeObject(t, m))
			}
		}
		out["items"] = norm
		return prune(out).(map[string]any)
	case kind == "Pod":
		p := normalizePod(t, map[string]any{"metadata": obj["metadata"], "spec": obj["spec"]})
		out["metadata"], out["spec"] = p["metadata"], p["spec"]
		delete(out, "status")
		return out
	}
	spec, _ := obj["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	if tmpl == nil {
		return prune(out).(map[string]any)
	}
	s := map[string]any{}
	for k, v := range spec {
		s[k] = v
	}
	delete(s, "template")
	out["spec"] = s
	out = prune(out).(map[string]any)
	s, _ = out["spec"].(map[string]any)
	if s == nil {
		s = map[string]any{}
		out["spec"] = s
	}
	s["template"] = normalizePod(t, tmpl)
	return out
}

func normalizePod(t *testing.T, m map[string]any) map[string]any {
	var pod corev1.Pod
	if err := convert(m, &pod); err != nil {
		t.Fatalf("pod template: %v", err)
	}
	var out map[string]any
	if err := convert(map[string]any{"metadata": pod.ObjectMeta, "spec": pod.Spec}, &out); err != nil {
		t.Fatal(err)
	}
	if md, ok := out["metadata"].(map[string]any); ok {
		if an, ok := md["annotations"].(map[string]any); ok {
			if s, ok := an[statusAnnotation].(string); ok {
				var v any
				if err := json.Unmarshal([]byte(s), &v); err == nil {
					an[statusAnnotation] = v
				}
			}
		}
	}
	return out
}

// prune drops nulls, empty maps and zero scalars (0, false, ""),
// recursively. It only runs outside pod templates, on the parts the
// injector never touches: Istio writes them back through typed Go structs
// (OpenShift's DeploymentConfig, apps/v1 status) that emit zero-valued
// fields the input did not have (test: false, status.replicas: 0) or drop
// ones it had (paused: false).
func prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			e = prune(e)
			if e == nil {
				continue
			}
			if m, ok := e.(map[string]any); ok && len(m) == 0 {
				continue
			}
			if e == false || e == float64(0) || e == "" {
				continue
			}
			out[k] = e
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = prune(e)
		}
		return out
	}
	return v
}
