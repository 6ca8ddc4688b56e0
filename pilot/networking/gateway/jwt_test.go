package gateway_test

import (
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// TestRequestAuthenticationOnGateway checks Istio's ingress JWT: a
// RequestAuthentication selecting the ingress gateway's labels in its
// namespace puts jwt_authn first in the gateway's HTTP connection manager;
// a router it does not select gets none.
func TestRequestAuthenticationOnGateway(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, nt.LoadConfigs(t, "bookinfo-networking/bookinfo-gateway.yaml", "default")...)
	in.Configs = append(in.Configs, model.Config{
		Meta: model.Meta{Kind: model.KindRequestAuthentication, Name: "ingress-jwt", Namespace: "ingress"},
		Spec: &security.RequestAuthentication{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"istio": "ingressgateway"}},
			JwtRules: []*security.JWTRule{{Issuer: "testing@secure.istio.io", Jwks: `{"keys":[{"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}]}`}},
		},
	})
	push := in.PushContext()
	filters := func(p *model.Proxy) []*hcmv3.HttpFilter {
		t.Helper()
		ls := gateway.BuildListeners(p, push, discard)
		if len(ls) != 1 {
			t.Fatalf("%d listeners, want the bookinfo gateway's one", len(ls))
		}
		nt.ValidateRecursively(t, ls[0])
		hcm := &hcmv3.HttpConnectionManager{}
		if err := nt.MainFilter(ls[0].GetFilterChains()[0]).GetTypedConfig().UnmarshalTo(hcm); err != nil {
			t.Fatal(err)
		}
		return nt.WithoutTelemetry(hcm.GetHttpFilters())
	}
	got := filters(router("ingress", map[string]string{"istio": "ingressgateway"}))
	if len(got) < 2 || got[0].GetName() != authn.JWTFilterName || got[len(got)-1].GetName() != "envoy.filters.http.router" {
		t.Errorf("selected gateway's HTTP filters %v, want jwt_authn first and the router last", names(got))
	}
	for _, f := range filters(router("istio-system", map[string]string{"istio": "ingressgateway"})) {
		if f.GetName() == authn.JWTFilterName {
			t.Errorf("a gateway in another namespace got namespace ingress's jwt_authn")
		}
	}
}

func names(fs []*hcmv3.HttpFilter) []string {
	var out []string
	for _, f := range nt.WithoutTelemetry(fs) {
		out = append(out, f.GetName())
	}
	return out
}
