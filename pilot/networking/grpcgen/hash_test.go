package grpcgen

import (
	"os"
	"path/filepath"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// hashPush is Bookinfo with a reviews DestinationRule hashing on key and
// the VirtualServices of vsFiles instead of Bookinfo's.
func hashPush(t *testing.T, key string, vsFiles ...string) *model.PushContext {
	t.Helper()
	dr := `apiVersion: networking.istio.io/v1
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
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
  - {name: v3, labels: {version: v3}}
`
	path := filepath.Join(t.TempDir(), "dr.yaml")
	if err := os.WriteFile(path, []byte(dr), 0o600); err != nil {
		t.Fatal(err)
	}
	in := networkingtest.Bookinfo(t)
	kept := in.Configs[:0]
	for _, c := range in.Configs {
		if c.Kind == model.KindVirtualService || (c.Kind == model.KindDestinationRule && c.Name == "reviews") {
			continue
		}
		kept = append(kept, c)
	}
	in.Configs = append(kept, networkingtest.LoadConfigs(t, path, "default")...)
	for _, f := range vsFiles {
		in.Configs = append(in.Configs, networkingtest.LoadConfigs(t, f, "default")...)
	}
	return in.PushContext()
}

func TestRouteHashPolicyHeaderOnly(t *testing.T) {
	const name = "reviews.default.svc.cluster.local:9080"
	proxy := networkingtest.BookinfoProxy("productpage-v1")
	proxy.Metadata.Generator = model.GeneratorGRPC
	for _, tc := range []struct {
		name, key string
		vs        []string
		want      string // header name; "": no hash policy
	}{
		{"default route header", "httpHeaderName: x-user", nil, "x-user"},
		{"weighted header", "httpHeaderName: x-user", []string{"bookinfo-networking/virtual-service-reviews-80-20.yaml"}, "x-user"},
		{"match header", "httpHeaderName: x-user", []string{"bookinfo-networking/virtual-service-reviews-jason-v2-v3.yaml"}, "x-user"},
		{"source ip dropped", "useSourceIp: true", []string{"bookinfo-networking/virtual-service-reviews-v3.yaml"}, ""},
		{"cookie dropped", "httpCookie: {name: user, ttl: 0s}", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcs := generate[*routev3.RouteConfiguration](t, model.RouteType, proxy, hashPush(t, tc.key, tc.vs...), name)
			rc := rcs[name]
			if rc == nil || len(rc.GetVirtualHosts()) != 1 {
				t.Fatalf("route configuration %s: %v", name, rc)
			}
			for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
				hp := r.GetRoute().GetHashPolicy()
				if tc.want == "" {
					if hp != nil {
						t.Errorf("route %q: hash policy %v, want none", r.GetName(), hp)
					}
					continue
				}
				if len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != tc.want {
					t.Errorf("route %q: hash policy %v, want header %s", r.GetName(), hp, tc.want)
				}
			}
		})
	}
}
