package gateway_test

import (
	"sync/atomic"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// cachedBookinfo is Bookinfo with Istio's bookinfo-gateway.yaml and the TCP
// servers of testdata/tcp.yaml, with an XDSCache counting hits.
func cachedBookinfo(t testing.TB) (nt.Input, *atomic.Int64) {
	t.Helper()
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, nt.LoadConfigs(t, "bookinfo-networking/bookinfo-gateway.yaml", "default")...)
	in.Configs = append(in.Configs, nt.LoadConfigs(t, mustAbs(t, "testdata/tcp.yaml"), "default")...)
	hits := &atomic.Int64{}
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{OnRead: func(hit bool) {
		if hit {
			hits.Add(1)
		}
	}})
	return in, hits
}

// pod is a router pod of the ingress gateway Deployment.
func pod(name, ip string) *model.Proxy {
	p := ingress()
	p.ID = "router~" + ip + "~" + name + ".istio-system~istio-system.svc.cluster.local"
	p.IPAddresses, p.PodName = []string{ip}, name
	return p
}

type generated struct {
	lds, rds model.Resources
}

func generate(t *testing.T, p *model.Proxy, push *model.PushContext) generated {
	t.Helper()
	lds, err := gateway.ListenerGenerator{}.Generate(p, push, &model.WatchedResource{TypeURL: model.ListenerType, Wildcard: true}, nil)
	if err != nil || len(lds) != 4 {
		t.Fatalf("%s: lds: %d listeners (want 4), %v", p.ID, len(lds), err)
	}
	w := &model.WatchedResource{TypeURL: model.RouteType, ResourceNames: map[string]struct{}{"http.8080": {}}}
	rds, err := gateway.RouteGenerator{}.Generate(p, push, w, nil)
	if err != nil || len(rds) != 1 {
		t.Fatalf("%s: rds: %d routes (want 1), %v", p.ID, len(rds), err)
	}
	return generated{lds, rds}
}

func sameEntries(a, b model.Resources) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCacheSharedByGatewayPods: the second pod of the gateway Deployment
// gets the first one's listeners and routes from the cache (the same
// *discovery.Resource values, counted as hits); a router with other labels
// does not; a Secret change keeps them; a change of the bound VirtualService
// makes new ones, equal to an uncached build.
func TestCacheSharedByGatewayPods(t *testing.T) {
	in, hits := cachedBookinfo(t)
	env := in.Environment()
	push := model.NewPushContext(env, nil, nil)

	first := generate(t, pod("ingress-a", "10.244.1.1"), push)
	if hits.Load() != 0 {
		t.Fatalf("%d cache hits on an empty cache", hits.Load())
	}
	second := generate(t, pod("ingress-b", "10.244.1.2"), push)
	if !sameEntries(first.lds, second.lds) || !sameEntries(first.rds, second.rds) {
		t.Error("second pod of the gateway Deployment did not get the cached resources")
	}
	if got := hits.Load(); got != 2 {
		t.Errorf("%d cache hits for the second pod, want 2 (LDS, RDS)", got)
	}
	other := router("istio-system", map[string]string{"istio": "ingressgateway", "canary": "true"})
	if o := generate(t, other, push); sameEntries(o.lds, first.lds) {
		t.Error("a router with other labels shares the cache entry")
	}

	// A Secret changes: SDS only; gateway listeners name credentials only.
	in.Cache.Invalidate(model.NewPushRequest(true, model.ReasonConfigUpdate,
		model.ConfigKey{Kind: model.KindSecret, Name: "db-cert", Namespace: "istio-system"}))
	push = model.NewPushContext(env, push, nil)
	if again := generate(t, pod("ingress-a", "10.244.1.1"), push); !sameEntries(again.lds, first.lds) {
		t.Error("a Secret change dropped the gateway listeners")
	}

	// The bound VirtualService changes.
	var changed []model.Config
	for _, c := range in.Configs {
		if c.Kind == model.KindVirtualService && c.Name == "bookinfo" {
			c.Spec = &networking.VirtualService{
				Hosts: []string{"*"}, Gateways: []string{"bookinfo-gateway"},
				Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{
					Destination: &networking.Destination{Host: "reviews", Port: &networking.PortSelector{Number: 9080}},
				}}}},
			}
		}
		changed = append(changed, c)
	}
	in.Configs = changed
	env.ConfigStore = nt.NewConfigStore(changed)
	req := model.NewPushRequest(true, model.ReasonConfigUpdate,
		model.ConfigKey{Kind: model.KindVirtualService, Name: "bookinfo", Namespace: "default"})
	in.Cache.Invalidate(req)
	push = model.NewPushContext(env, push, req)
	after := generate(t, pod("ingress-b", "10.244.1.2"), push)
	if sameEntries(after.rds, first.rds) || sameEntries(after.lds, first.lds) {
		t.Fatal("a change of the bound VirtualService kept the cached resources")
	}
	rc := &routev3.RouteConfiguration{}
	if err := after.rds[0].GetResource().UnmarshalTo(rc); err != nil {
		t.Fatal(err)
	}
	nt.ValidateRecursively(t, rc)
	if c := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); c != "outbound|9080||reviews.default.svc.cluster.local" {
		t.Errorf("route after the change goes to %q, want reviews", c)
	}
	uncached := in
	uncached.Cache = nil
	fresh := generate(t, pod("ingress-b", "10.244.1.2"), uncached.PushContext())
	for i := range fresh.lds {
		if string(fresh.lds[i].GetResource().GetValue()) != string(after.lds[i].GetResource().GetValue()) {
			t.Errorf("cached listener %s differs from an uncached build", fresh.lds[i].GetName())
		}
	}
	if string(fresh.rds[0].GetResource().GetValue()) != string(after.rds[0].GetResource().GetValue()) {
		t.Error("cached route configuration differs from an uncached build")
	}
}
