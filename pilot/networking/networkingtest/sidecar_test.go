package networkingtest_test

import (
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// bookinfoWithProd is Bookinfo in default plus a service in namespace prod.
func bookinfoWithProd(t *testing.T, configs ...model.Config) *model.PushContext {
	t.Helper()
	in := nt.Bookinfo(t)
	in.Services = append(in.Services, nt.KubeService("inventory", "prod", "10.96.9.9", model.Port{Name: "http", Port: 8080}))
	in.Endpoints["inventory.prod.svc.cluster.local"] = []*model.Endpoint{nt.Endpoint("10.244.9.9", 8080, "http", map[string]string{"app": "inventory"})}
	in.Configs = append(in.Configs, configs...)
	return in.PushContext()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestSidecarEgressNarrowsBookinfo(t *testing.T) {
	sc := model.Config{
		Meta: model.Meta{Kind: model.KindSidecar, Name: "default", Namespace: "default"},
		Spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*"}}}},
	}
	push := bookinfoWithProd(t, sc)
	reviews := generate(t, nt.BookinfoProxy("reviews-v1"), push)
	want := []string{
		"BlackHoleCluster",
		"InboundPassthroughCluster",
		"PassthroughCluster",
		"inbound|9080||",
		"outbound|9080|v1|details.default.svc.cluster.local",
		"outbound|9080|v1|productpage.default.svc.cluster.local",
		"outbound|9080|v1|ratings.default.svc.cluster.local",
		"outbound|9080|v1|reviews.default.svc.cluster.local",
		"outbound|9080|v2-mysql-vm|ratings.default.svc.cluster.local",
		"outbound|9080|v2-mysql|ratings.default.svc.cluster.local",
		"outbound|9080|v2|details.default.svc.cluster.local",
		"outbound|9080|v2|ratings.default.svc.cluster.local",
		"outbound|9080|v2|reviews.default.svc.cluster.local",
		"outbound|9080|v3|reviews.default.svc.cluster.local",
		"outbound|9080||details.default.svc.cluster.local",
		"outbound|9080||productpage.default.svc.cluster.local",
		"outbound|9080||ratings.default.svc.cluster.local",
		"outbound|9080||reviews.default.svc.cluster.local",
	}
	if got := sortedKeys(reviews.clusters); !slices.Equal(got, want) {
		t.Fatalf("reviews-v1 under Sidecar ./* got clusters\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for name := range reviews.listeners {
		if strings.Contains(name, "8080") {
			t.Errorf("reviews-v1 got listener %s for prod's out-of-scope port", name)
		}
	}

	// A proxy in another namespace has no Sidecar and sees everything.
	other := generate(t, nt.Proxy("10.244.9.10", "client", "staging", nil), push)
	wantOther := slices.DeleteFunc(slices.Clone(want), func(n string) bool { return strings.HasPrefix(n, "inbound|") })
	wantOther = append(wantOther, "outbound|8080||inventory.prod.svc.cluster.local")
	slices.Sort(wantOther)
	if got := sortedKeys(other.clusters); !slices.Equal(got, wantOther) {
		t.Fatalf("proxy in staging got clusters\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantOther, "\n"))
	}

	// Without the Sidecar reviews-v1 sees prod's service too.
	unscoped := generate(t, nt.BookinfoProxy("reviews-v1"), bookinfoWithProd(t))
	if unscoped.clusters["outbound|8080||inventory.prod.svc.cluster.local"] == nil {
		t.Fatal("without a Sidecar reviews-v1 must see inventory.prod")
	}
}

func TestSidecarOneNamespaceForm(t *testing.T) {
	// The root namespace's mesh-wide default lets reviews-v1 see only prod
	// (a narrower one-namespace form); its own namespace has no Sidecar.
	sc := model.Config{
		Meta: model.Meta{Kind: model.KindSidecar, Name: "default", Namespace: "istio-system"},
		Spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"prod/*"}}}},
	}
	push := bookinfoWithProd(t, sc)
	got := generate(t, nt.BookinfoProxy("reviews-v1"), push)
	want := []string{"BlackHoleCluster", "InboundPassthroughCluster", "PassthroughCluster", "inbound|9080||",
		"outbound|8080||inventory.prod.svc.cluster.local"}
	if names := sortedKeys(got.clusters); !slices.Equal(names, want) {
		t.Fatalf("reviews-v1 under root Sidecar prod/* got clusters %v, want %v", names, want)
	}
}

// TestSidecarPartialAndCached checks the paths that do not go through
// ServicesFor: the partial (per-service) cluster generator and the
// resource cache shared by proxies of one namespace under different
// Sidecars.
func TestSidecarPartialAndCached(t *testing.T) {
	sc := model.Config{
		Meta: model.Meta{Kind: model.KindSidecar, Name: "reviews", Namespace: "default"},
		Spec: &networking.Sidecar{
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "reviews"}},
			Egress:           []*networking.IstioEgressListener{{Hosts: []string{"./*"}}},
		},
	}
	build := func(cache *model.XDSCache) *model.PushContext {
		in := nt.Bookinfo(t)
		in.Services = append(in.Services, nt.KubeService("inventory", "prod", "10.96.9.9", model.Port{Name: "http", Port: 8080}))
		in.Configs = append(in.Configs, sc)
		in.Cache = cache
		return in.PushContext()
	}
	reviews, productpage := nt.BookinfoProxy("reviews-v1"), nt.BookinfoProxy("productpage-v1")

	push := build(nil)
	hosts := map[string]struct{}{"inventory.prod.svc.cluster.local": {}, "details.default.svc.cluster.local": {}}
	part, err := cluster.Generator{}.GenerateServices(reviews, push, &model.WatchedResource{TypeURL: model.ClusterType, Wildcard: true}, hosts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range part {
		if model.ResourceHost(r.GetName()) != "details.default.svc.cluster.local" {
			t.Errorf("partial CDS for reviews-v1 sent out-of-scope cluster %s", r.GetName())
		}
	}
	if len(part) == 0 {
		t.Fatal("partial CDS for reviews-v1 left out the in-scope details clusters")
	}

	// productpage (no Sidecar) and reviews-v1 (Sidecar ./*) share a
	// namespace; each proxy's cached output must equal its uncached output,
	// whichever fills the cache first.
	for _, order := range [][]*model.Proxy{{productpage, reviews}, {reviews, productpage}} {
		cached := build(model.NewXDSCache(model.XDSCacheOptions{}))
		for _, p := range order {
			sameResources(t, "cached "+p.ID, generateAll(t, p, cached), generateAll(t, p, push))
		}
	}
	for p, want := range map[*model.Proxy]bool{reviews: false, productpage: true} {
		var rc routev3.RouteConfiguration
		if err := proto.Unmarshal(generateAll(t, p, push)["rds/8080"], &rc); err != nil {
			t.Fatal(err)
		}
		got := slices.ContainsFunc(rc.GetVirtualHosts(), func(vh *routev3.VirtualHost) bool { return strings.HasPrefix(vh.GetName(), "inventory.prod") })
		if got != want {
			t.Errorf("%s: route configuration 8080 has inventory.prod: %v, want %v", p.ID, got, want)
		}
	}
}

// TestSidecarOutboundTrafficPolicy checks a Sidecar's REGISTRY_ONLY beats
// the mesh's ALLOW_ANY for the proxies it selects only, cached or not.
func TestSidecarOutboundTrafficPolicy(t *testing.T) {
	sc := model.Config{
		Meta: model.Meta{Kind: model.KindSidecar, Name: "reviews", Namespace: "default"},
		Spec: &networking.Sidecar{
			WorkloadSelector:      &networking.WorkloadSelector{Labels: map[string]string{"app": "reviews"}},
			OutboundTrafficPolicy: &networking.OutboundTrafficPolicy{Mode: networking.OutboundTrafficPolicy_REGISTRY_ONLY},
		},
	}
	for _, cache := range []*model.XDSCache{nil, model.NewXDSCache(model.XDSCacheOptions{})} {
		in := nt.Bookinfo(t)
		in.Configs = append(in.Configs, sc)
		in.Mesh = &meshconfig.MeshConfig{OutboundTrafficPolicy: &meshconfig.MeshConfig_OutboundTrafficPolicy{Mode: meshconfig.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY}}
		in.Cache = cache
		push := in.PushContext()
		for _, tc := range []struct {
			workload  string
			catchAll  string
			vhostName string
		}{
			{"productpage-v1", "PassthroughCluster", "allow_any"},
			{"reviews-v1", "BlackHoleCluster", "block_all"},
			{"productpage-v1", "PassthroughCluster", "allow_any"},
		} {
			s := generate(t, nt.BookinfoProxy(tc.workload), push)
			vo := s.listeners["virtualOutbound"]
			chains := vo.GetFilterChains()
			var tcp tcpproxyv3.TcpProxy
			if err := chains[len(chains)-1].GetFilters()[0].GetTypedConfig().UnmarshalTo(&tcp); err != nil {
				t.Fatal(err)
			}
			if tcp.GetCluster() != tc.catchAll {
				t.Errorf("cache %v: %s virtualOutbound catch-all goes to %s, want %s", cache != nil, tc.workload, tcp.GetCluster(), tc.catchAll)
			}
			vhs := s.routes["9080"].GetVirtualHosts()
			if got := vhs[len(vhs)-1].GetName(); got != tc.vhostName {
				t.Errorf("cache %v: %s route 9080 ends with virtual host %s, want %s", cache != nil, tc.workload, got, tc.vhostName)
			}
		}
	}
}
