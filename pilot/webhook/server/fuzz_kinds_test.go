package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/meshpilot/meshpilot/pilot/config/validation"
	"github.com/meshpilot/meshpilot/pilot/webhook/validate"
)

// fuzzKinds are the kinds the config loader reads (pilot/config/file's
// lookupIstioKind and newKubeObject): every Istio CRD the validator knows,
// and the Gateway API kinds, which /validate must refuse cleanly.
var fuzzKinds = []struct{ apiVersion, kind, spec string }{
	{"networking.istio.io/v1", "VirtualService", `{"hosts":["r"],"http":[{"match":[{"uri":{"regex":"a.*"}}],"route":[{"destination":{"host":"r","subset":"v1"},"weight":100}]}]}`},
	{"networking.istio.io/v1", "DestinationRule", `{"host":"r","subsets":[{"name":"v1","labels":{"v":"1"}}],"trafficPolicy":{"connectionPool":{"tcp":{"connectTimeout":"1s"}}}}`},
	{"networking.istio.io/v1", "Gateway", `{"selector":{"istio":"ingressgateway"},"servers":[{"port":{"number":443,"name":"https","protocol":"HTTPS"},"hosts":["*"],"tls":{"mode":"SIMPLE","credentialName":"c"}}]}`},
	{"networking.istio.io/v1", "Sidecar", `{"egress":[{"hosts":["./*"]}]}`},
	{"networking.istio.io/v1", "ServiceEntry", `{"hosts":["a.example"],"ports":[{"number":80,"name":"http","protocol":"HTTP"}],"resolution":"DNS"}`},
	{"networking.istio.io/v1", "WorkloadEntry", `{"address":"10.0.0.1","labels":{"app":"a"}}`},
	{"networking.istio.io/v1", "WorkloadGroup", `{"template":{"labels":{"app":"a"}}}`},
	{"networking.istio.io/v1alpha3", "EnvoyFilter", `{"configPatches":[{"applyTo":"HTTP_FILTER","patch":{"operation":"INSERT_BEFORE","value":{"name":"x"}}}]}`},
	{"networking.istio.io/v1beta1", "ProxyConfig", `{"concurrency":2}`},
	{"security.istio.io/v1", "AuthorizationPolicy", `{"action":"DENY","rules":[{"from":[{"source":{"principals":["*"]}}]}]}`},
	{"security.istio.io/v1", "PeerAuthentication", `{"mtls":{"mode":"STRICT"}}`},
	{"security.istio.io/v1", "RequestAuthentication", `{"jwtRules":[{"issuer":"i","jwksUri":"https://example.com/jwks"}]}`},
	{"telemetry.istio.io/v1", "Telemetry", `{"accessLogging":[{"providers":[{"name":"envoy"}]}]}`},
	{"extensions.istio.io/v1alpha1", "WasmPlugin", `{"url":"oci://example.com/p:1"}`},
	{"extensions.istio.io/v1alpha1", "TrafficExtension", `{}`},
	{"gateway.networking.k8s.io/v1", "GatewayClass", `{"controllerName":"istio.io/gateway-controller"}`},
	{"gateway.networking.k8s.io/v1", "Gateway", `{"gatewayClassName":"istio","listeners":[{"name":"h","port":80,"protocol":"HTTP"}]}`},
	{"gateway.networking.k8s.io/v1", "HTTPRoute", `{"parentRefs":[{"name":"g"}],"rules":[{"backendRefs":[{"name":"s","port":80}]}]}`},
	{"gateway.networking.k8s.io/v1", "GRPCRoute", `{"parentRefs":[{"name":"g"}]}`},
	{"gateway.networking.k8s.io/v1alpha2", "TLSRoute", `{"parentRefs":[{"name":"g"}]}`},
	{"gateway.networking.k8s.io/v1alpha2", "TCPRoute", `{"parentRefs":[{"name":"g"}]}`},
	{"gateway.networking.k8s.io/v1alpha2", "UDPRoute", `{"parentRefs":[{"name":"g"}]}`},
	{"gateway.networking.k8s.io/v1beta1", "ReferenceGrant", `{"from":[{"group":"","kind":"Service","namespace":"a"}],"to":[{"group":"","kind":"Service"}]}`},
	{"gateway.networking.k8s.io/v1", "ListenerSet", `{"parentRef":{"name":"g"},"listeners":[]}`},
}

// FuzzValidateKinds: any object of any kind the validator knows (and the
// Gateway API kinds it does not), sent to /validate in a well-formed
// review, gets a verdict: never a panic or a 5xx, the request's UID, a
// denial listing at most DefaultMaxErrors errors, an answer within the cap.
func FuzzValidateKinds(f *testing.F) {
	for i, k := range fuzzKinds {
		f.Add(uint8(i), k.kind, fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":"x","namespace":"default"},"spec":%s}`, k.apiVersion, k.kind, k.spec))
	}
	f.Add(uint8(0), "VirtualService", `{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","spec":{"http":[{"route":[{"weight":-1}]},{"route":[{"weight":-1}]}]}}`)
	f.Add(uint8(9), "AuthorizationPolicy", `{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","spec":null}`)
	f.Add(uint8(3), "Sidecar", `[]`)
	h := New(Options{Validator: validate.New(validate.Options{Validator: validation.New(validation.Options{})})}).Handler()
	f.Fuzz(func(t *testing.T, kindIndex uint8, kind, object string) {
		k := fuzzKinds[int(kindIndex)%len(fuzzKinds)]
		group, version, _ := strings.Cut(k.apiVersion, "/")
		if kind == "" {
			kind = k.kind
		}
		raw := json.RawMessage(object)
		if !json.Valid(raw) {
			quoted, _ := json.Marshal(object)
			raw = quoted
		}
		review := map[string]any{
			"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
			"request": map[string]any{
				"uid": "fuzz", "name": "x", "namespace": "default", "operation": "CREATE",
				"kind":     map[string]string{"group": group, "version": version, "kind": kind},
				"resource": map[string]string{"group": group, "version": version, "resource": strings.ToLower(kind) + "s"},
				"object":   raw,
			},
		}
		body, err := json.Marshal(review)
		if err != nil {
			t.Skip("not encodable as a review")
		}
		req := httptest.NewRequest(http.MethodPost, "/validate", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s: status %d: %.300s", k.apiVersion, kind, rec.Code, rec.Body.String())
		}
		if rec.Code != http.StatusOK {
			return
		}
		if rec.Body.Len() > DefaultMaxValidateResponseBytes {
			t.Fatalf("answer of %d bytes", rec.Body.Len())
		}
		var ar admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &ar); err != nil || ar.Response == nil || ar.Response.UID != "fuzz" {
			t.Fatalf("no review answering uid fuzz: %v: %.300s", err, rec.Body.String())
		}
		if r := ar.Response.Result; r != nil && r.Details != nil && len(r.Details.Causes) > validate.DefaultMaxErrors {
			t.Fatalf("%d causes listed", len(r.Details.Causes))
		}
	})
}
