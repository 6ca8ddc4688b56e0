package route_test

import (
	"os"
	"path/filepath"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/model"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// reviewsHashDR is destination-rule-all.yaml's reviews rule with a
// consistent-hash load balancer of key.
func reviewsHashDR(key string) string {
	return `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
spec:
  host: reviews
  trafficPolicy:
    loadBalancer:
      consistentHash:
        ` + key + `
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v2
    labels: {version: v2}
  - name: v3
    labels: {version: v3}
`
}

// bookinfoHashed is Bookinfo with the reviews DestinationRule replaced by
// reviewsHashDR(key) and the VirtualServices of vsFiles (none: no
// VirtualService, the default route).
func bookinfoHashed(t *testing.T, key string, vsFiles ...string) *model.PushContext {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dr.yaml")
	if err := os.WriteFile(path, []byte(reviewsHashDR(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	in := nt.Bookinfo(t)
	var keep []model.Config
	for _, c := range in.Configs {
		if c.Kind == model.KindVirtualService || (c.Kind == model.KindDestinationRule && c.Name == "reviews") {
			continue
		}
		keep = append(keep, c)
	}
	keep = append(keep, nt.LoadConfigs(t, path, "default")...)
	for _, f := range vsFiles {
		keep = append(keep, nt.LoadConfigs(t, f, "default")...)
	}
	in.Configs = keep
	return in.PushContext()
}

func TestHashPolicyFromDestinationRule(t *testing.T) {
	header := &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
		Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: "x-user"},
	}}
	sourceIP := &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{
		ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true},
	}}
	for _, tc := range []struct {
		name, key string
		vs        []string
		want      *routev3.RouteAction_HashPolicy
		routes    int
	}{
		{"default route", "httpHeaderName: x-user", nil, header, 1},
		{"single subset", "httpHeaderName: x-user", []string{"bookinfo-networking/virtual-service-reviews-v3.yaml"}, header, 1},
		{"weighted", "httpHeaderName: x-user", []string{"bookinfo-networking/virtual-service-reviews-80-20.yaml"}, header, 1},
		{"match and fallback", "httpHeaderName: x-user", []string{"bookinfo-networking/virtual-service-reviews-jason-v2-v3.yaml"}, header, 2},
		{"source ip", "useSourceIp: true", []string{"bookinfo-networking/virtual-service-reviews-50-v3.yaml"}, sourceIP, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			routes := hostRoutes(t, bookinfoHashed(t, tc.key, tc.vs...), reviewsHost)
			if len(routes) != tc.routes {
				t.Fatalf("reviews: %d routes, want %d", len(routes), tc.routes)
			}
			for _, r := range routes {
				got := r.GetRoute().GetHashPolicy()
				if len(got) != 1 || !proto.Equal(got[0], tc.want) {
					t.Errorf("route %q: hash policy %v, want [%v]", r.GetName(), got, tc.want)
				}
			}
			// Services whose rule does not hash carry no policy.
			for _, r := range hostRoutes(t, bookinfoHashed(t, tc.key, tc.vs...), ratingsHost) {
				if hp := r.GetRoute().GetHashPolicy(); hp != nil {
					t.Errorf("ratings route %q: hash policy %v, want none", r.GetName(), hp)
				}
			}
		})
	}
}

func TestHashPolicyLookupNil(t *testing.T) {
	push := bookinfoHashed(t, "httpHeaderName: x-user")
	if got := route.PushHashPolicies(push, nt.Proxy("10.9.9.9", "c", "default", nil))("nosuch.default.svc.cluster.local", "", 9080); got != nil {
		t.Errorf("unknown host: %v, want nil", got)
	}
}

// A VirtualService with tcp routes only leaves the HTTP port its default
// route (with the hash policy).
func TestTCPOnlyVirtualServiceKeepsDefaultRoute(t *testing.T) {
	vs := filepath.Join(t.TempDir(), "vs.yaml")
	if err := os.WriteFile(vs, []byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews-tcp
spec:
  hosts: [reviews]
  tcp:
  - route:
    - destination: {host: reviews, subset: v2}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	routes := hostRoutes(t, bookinfoHashed(t, "httpHeaderName: x-user", vs), reviewsHost)
	if len(routes) != 1 || routes[0].GetName() != route.DefaultRouteName ||
		routes[0].GetRoute().GetCluster() != "outbound|9080||"+reviewsHost || len(routes[0].GetRoute().GetHashPolicy()) != 1 {
		t.Errorf("reviews routes %v, want the default route with a hash policy", routes)
	}
}
