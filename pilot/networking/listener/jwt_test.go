package listener_test

import (
	"testing"

	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"

	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/authz"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// productpageJWT is Istio's docs example (Authorization with JWT) for
// Bookinfo's productpage: validate tokens of testing@secure.istio.io and
// allow only requests carrying one.
const productpageJWT = `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata:
  name: jwt-example
  namespace: default
spec:
  selector:
    matchLabels:
      app: productpage
  jwtRules:
  - issuer: "testing@secure.istio.io"
    jwksUri: "https://raw.githubusercontent.com/istio/istio/release-1.24/security/tools/jwt/samples/jwks.json"
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: require-jwt
  namespace: default
spec:
  selector:
    matchLabels:
      app: productpage
  action: ALLOW
  rules:
  - from:
    - source:
        requestPrincipals: ["testing@secure.istio.io/testing@secure.istio.io"]
`

// TestInboundRequestAuthentication: every HTTP chain of productpage's
// inbound port starts with jwt_authn, then the RBAC filters, and ends with
// the router; reviews, which no RequestAuthentication selects, has none.
// build validates every listener (ValidateAll, typed configs included).
func TestInboundRequestAuthentication(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, loadSecurity(t, productpageJWT)...)

	pp := build(t, in, nt.BookinfoProxy("productpage-v1"))[listener.VirtualInbound]
	chains := chainsFor(pp, 9080)
	if len(chains) == 0 {
		t.Fatal("productpage has no chain for port 9080")
	}
	for name, fc := range chains {
		filters := nt.WithoutTelemetry(hcm(t, nt.MainFilter(fc)).GetHttpFilters())
		if len(filters) < 3 || filters[0].GetName() != authn.JWTFilterName || !authz.IsRBACFilter(filters[1].GetName()) ||
			filters[len(filters)-1].GetName() != wellknown.Router {
			var names []string
			for _, f := range filters {
				names = append(names, f.GetName())
			}
			t.Errorf("chain %s http filters %q, want jwt_authn, RBAC..., router", name, names)
			continue
		}
		var cfg jwtv3.JwtAuthentication
		if err := filters[0].GetTypedConfig().UnmarshalTo(&cfg); err != nil {
			t.Fatal(err)
		}
		p := cfg.GetProviders()["origins-0"]
		if len(cfg.GetProviders()) != 1 || p.GetIssuer() != "testing@secure.istio.io" ||
			p.GetRemoteJwks().GetHttpUri().GetCluster() != "outbound|443||raw.githubusercontent.com" {
			t.Errorf("chain %s providers %v", name, cfg.GetProviders())
		}
	}

	reviews := build(t, in, nt.BookinfoProxy("reviews-v1"))[listener.VirtualInbound]
	for name, fc := range chainsFor(reviews, 9080) {
		if nt.MainFilter(fc).GetName() != wellknown.HTTPConnectionManager {
			continue
		}
		for _, f := range hcm(t, nt.MainFilter(fc)).GetHttpFilters() {
			if f.GetName() == authn.JWTFilterName {
				t.Errorf("reviews chain %s has a jwt_authn filter", name)
			}
		}
	}
}
