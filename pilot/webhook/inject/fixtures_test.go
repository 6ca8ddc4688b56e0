package inject

import (
	"encoding/json"
	"fmt"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshpilot/meshpilot/internal/injectfixture"
)

// fixtureRoot is the directory of Istio's injector fixtures.
func fixtureRoot(t testing.TB) string { return injectfixture.Dir(t) }

// fixtureInjector builds the injector from the fixtures' ConfigMaps, with
// the settings of Istio's kube-inject golden test: revision "" and native
// sidecars.
func fixtureInjector(t testing.TB) *Injector {
	t.Helper()
	data := injectfixture.ConfigMaps(t, fixtureRoot(t))
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

// TestFixtures injects every workload of Istio's fixtures through Admit
// (AdmissionRequest → JSONPatch → patched pod) and compares the result with
// Istio's output semantically. Cases in testdata/exceptions.yaml must fail
// and all others pass, so the list cannot go stale.
func TestFixtures(t *testing.T) {
	inj := fixtureInjector(t)
	n := injectfixture.Run(t, fixtureRoot(t), "testdata/exceptions.yaml", func(pod *corev1.Pod, o injectfixture.Owner) (*corev1.Pod, error) {
		var w *Workload
		if !o.Pod {
			w = &Workload{TypeMeta: metav1.TypeMeta{Kind: o.Kind, APIVersion: o.APIVersion}, Name: o.Name, Namespace: o.Namespace}
		}
		return admitPod(inj, pod, Options{Workload: w})
	})
	if n != 36 {
		t.Errorf("found %d cases, want Istio's 36", n)
	}
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
