package inject

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// FuzzAdmit feeds arbitrary pod JSON (anyone who reaches 15017 can send
// it) through Admit with Istio's default ConfigMap: it must answer, never
// panic, and a patch it returns must be valid JSON.
func FuzzAdmit(f *testing.F) {
	inj := fixtureInjector(f)
	hello, err := json.Marshal(helloPod(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(hello)
	f.Add([]byte(`{"metadata":{"annotations":{"sidecar.istio.io/inject":"true","proxy.istio.io/config":"concurrency: -1"}},"spec":{"containers":[{"name":"a","ports":[{"containerPort":70000}]}]}}`))
	f.Add([]byte(`{"metadata":{"annotations":{"inject.istio.io/templates":"nope","traffic.sidecar.istio.io/includeOutboundIPRanges":"x/99"}},"spec":{"containers":[{"name":"a","readinessProbe":{"httpGet":{"port":"http"}}}]}}`))
	f.Add([]byte(`{"spec":{"hostNetwork":true}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, pod []byte) {
		req := &admissionv1.AdmissionRequest{UID: "fuzz", Namespace: "apps",
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtime.RawExtension{Raw: pod}}
		resp := inj.Admit(req, Options{})
		if resp == nil {
			t.Fatal("no response")
		}
		if len(resp.Patch) > 0 && !json.Valid(resp.Patch) {
			t.Fatalf("invalid JSONPatch: %q", resp.Patch)
		}
	})
}
