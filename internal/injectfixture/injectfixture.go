// Package injectfixture runs Istio's sidecar-injector fixtures
// (shared/testdata/istio-inject, see its README.md) against an injector and
// reports, per case, how its output differs from Istio's. The injection
// engine's own test uses Istio's ConfigMaps; the chart's test uses the
// chart's.
package injectfixture

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
)

// statusAnnotation holds JSON; it is compared parsed.
const statusAnnotation = "sidecar.istio.io/status"

// Dir is the fixture directory: $ISTIO_INJECT_FIXTURES, or
// shared/testdata/istio-inject beside the repository.
func Dir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("ISTIO_INJECT_FIXTURES"); d != "" {
		return d
	}
	return fixtures.Shared(t, "istio-inject")
}

// ConfigMaps returns the data of the fixtures' ConfigMaps by name ("istio",
// "istio-sidecar-injector").
func ConfigMaps(t testing.TB, dir string) map[string]map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "configmaps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]map[string]string{}
	for _, doc := range SplitYAML(string(raw)) {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
			t.Fatalf("configmaps.yaml: %v", err)
		}
		data[cm.Name] = cm.Data
	}
	return data
}

// SplitYAML splits a multi-document YAML stream, dropping empty documents.
func SplitYAML(s string) []string {
	var docs []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

// commonCases run first; every other case of the directory follows.
var commonCases = []string{
	"hello", "frontend", "pod", "list", "hello-probes", "multi-container",
	"status_annotations", "traffic-annotations-empty-includes", "traffic-params-empty-includes",
}

// Cases lists the fixture cases (NAME of cases/NAME.yaml), common ones first.
func Cases(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "cases"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range commonCases {
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
	return append(append([]string(nil), commonCases...), rest...)
}

// Exceptions reads a list of `- case: NAME` / `reason: ...` entries: the
// cases a test lets fail, each with its reason.
func Exceptions(t testing.TB, path string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var list []struct {
		Case   string `json:"case"`
		Reason string `json:"reason"`
	}
	if err := yaml.UnmarshalStrict(raw, &list); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	for _, e := range list {
		if e.Case == "" || strings.TrimSpace(e.Reason) == "" {
			t.Fatalf("%s: entry %+v needs case and reason", path, e)
		}
		out[e.Case] = e.Reason
	}
	return out
}

// Owner is the object whose pod template is injected. For a bare Pod,
// Pod is true and the injector derives the owner itself, as Istio does.
type Owner struct {
	Kind, APIVersion, Name, Namespace string
	Pod                               bool
}

// InjectFunc injects one pod template.
type InjectFunc func(pod *corev1.Pod, owner Owner) (*corev1.Pod, error)

// Run runs every case through inject and checks the list of exceptions
// (path): a listed case must fail and every other one pass, so the list
// cannot go stale. It returns the number of cases.
func Run(t *testing.T, dir, exceptionsPath string, inject InjectFunc) int {
	t.Helper()
	exceptions := Exceptions(t, exceptionsPath)
	cases := Cases(t, dir)
	known := map[string]bool{}
	for _, c := range cases {
		known[c] = true
	}
	for c := range exceptions {
		if !known[c] {
			t.Errorf("%s names unknown case %q", exceptionsPath, c)
		}
	}
	for _, name := range cases {
		t.Run(name, func(t *testing.T) {
			problem := Check(t, dir, name, inject)
			reason, excepted := exceptions[name]
			switch {
			case excepted && problem == "":
				t.Errorf("case passes now; remove it from %s (reason was: %s)", exceptionsPath, reason)
			case excepted:
				t.Logf("excepted (%s)", reason)
			case problem != "":
				t.Error(problem)
			}
		})
	}
	return len(cases)
}

// Check injects every document of case name and returns "" when the output
// equals Istio's semantically, else what differs.
func Check(t testing.TB, dir, name string, inject InjectFunc) string {
	t.Helper()
	in, err := os.ReadFile(filepath.Join(dir, "cases", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "cases", name+".yaml.injected"))
	if err != nil {
		t.Fatal(err)
	}
	inDocs, wantDocs := SplitYAML(string(in)), SplitYAML(string(want))
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
		got, err := injectObject(inject, doc)
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
func injectObject(inject InjectFunc, obj map[string]any) (map[string]any, error) {
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
			out, err := injectObject(inject, m)
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
	owner := Owner{Kind: kind, APIVersion: apiVersion, Pod: kind == "Pod"}
	owner.Name, _ = meta["name"].(string)
	owner.Namespace, _ = meta["namespace"].(string)
	injected, err := inject(pod, owner)
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
func normalizeObject(t testing.TB, obj map[string]any) map[string]any {
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

func normalizePod(t testing.TB, m map[string]any) map[string]any {
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
