package endpoint_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

const (
	reviewsHost    = "reviews.default.svc.cluster.local"
	reviewsCluster = "outbound|9080||" + reviewsHost
)

// bookinfoLocalities is Bookinfo with the reviews pods spread over
// region1/zone1 (v1, with a sidecar), region1/zone2 (v2, with a sidecar)
// and region2/zone3 (v3, without), and a DestinationRule for reviews with
// the given traffic policy.
func bookinfoLocalities(t *testing.T, policy *networking.TrafficPolicy) nt.Input {
	t.Helper()
	in := nt.Bookinfo(t)
	kept := in.Configs[:0]
	for _, c := range in.Configs {
		if c.Kind != model.KindDestinationRule {
			kept = append(kept, c)
		}
	}
	in.Configs = append(kept, model.Config{
		Meta: model.Meta{Kind: model.KindDestinationRule, Name: "reviews", Namespace: "default"},
		Spec: &networking.DestinationRule{Host: "reviews", TrafficPolicy: policy},
	})
	eps := []*model.Endpoint{
		nt.Endpoint(nt.BookinfoPods["reviews-v1"], 9080, "http", map[string]string{"app": "reviews", "version": "v1", "security.istio.io/tlsMode": "istio"}),
		nt.Endpoint(nt.BookinfoPods["reviews-v2"], 9080, "http", map[string]string{"app": "reviews", "version": "v2", "security.istio.io/tlsMode": "istio"}),
		nt.Endpoint(nt.BookinfoPods["reviews-v3"], 9080, "http", map[string]string{"app": "reviews", "version": "v3"}),
	}
	eps[0].Locality, eps[1].Locality, eps[2].Locality = "region1/zone1", "region1/zone2", "region2/zone3"
	in.Endpoints[reviewsHost] = eps
	return in
}

func proxyIn(workload, region, zone string) *model.Proxy {
	p := nt.BookinfoProxy(workload)
	p.Locality = &corev3.Locality{Region: region, Zone: zone}
	return p
}

// priorities maps each endpoint address of cla to its group's priority.
func priorities(t *testing.T, cla *endpointv3.ClusterLoadAssignment) map[string]uint32 {
	t.Helper()
	nt.ValidateRecursively(t, cla)
	out := map[string]uint32{}
	for _, g := range cla.GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			out[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = g.GetPriority()
		}
	}
	return out
}

func generated(t *testing.T, proxy *model.Proxy, push *model.PushContext, name string) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	res, err := endpoint.Generator{}.Generate(proxy, push, &model.WatchedResource{TypeURL: model.EndpointType, ResourceNames: map[string]struct{}{name: {}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("%d resources for %s, want 1", len(res), name)
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := res[0].GetResource().UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	return cla
}

func TestTLSModeMetadata(t *testing.T) {
	push := bookinfoLocalities(t, nil).PushContext()
	cla := endpoint.BuildLoadAssignment(nt.BookinfoProxy("productpage-v1"), push, reviewsCluster)
	nt.ValidateRecursively(t, cla)
	seen := 0
	for _, g := range cla.GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			seen++
			addr := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			md := e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"]
			if addr == nt.BookinfoPods["reviews-v3"] {
				if md != nil {
					t.Errorf("%s (no sidecar label): metadata %v, want none", addr, md)
				}
				continue
			}
			if md.GetFields()["tlsMode"].GetStringValue() != "istio" || len(md.GetFields()) != 1 {
				t.Errorf("%s: envoy.transport_socket_match %v, want {tlsMode: istio}", addr, md)
			}
		}
	}
	if seen != 3 {
		t.Fatalf("%d endpoints, want 3", seen)
	}
}

func TestLocalityFailoverPerProxy(t *testing.T) {
	policy := &networking.TrafficPolicy{OutlierDetection: &networking.OutlierDetection{ConsecutiveGatewayErrors: wrapperspb.UInt32(5)}}
	in := bookinfoLocalities(t, policy)
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	push := in.PushContext()
	v1, v2, v3 := nt.BookinfoPods["reviews-v1"], nt.BookinfoPods["reviews-v2"], nt.BookinfoPods["reviews-v3"]
	cases := []struct {
		proxy *model.Proxy
		want  map[string]uint32
	}{
		{proxyIn("productpage-v1", "region1", "zone1"), map[string]uint32{v1: 0, v2: 1, v3: 2}},
		{proxyIn("ratings-v1", "region1", "zone2"), map[string]uint32{v1: 1, v2: 0, v3: 2}},
		{proxyIn("details-v1", "region2", "zone3"), map[string]uint32{v1: 1, v2: 1, v3: 0}},
	}
	// Twice: the second round is served from the cache, which must not
	// hand one proxy's priorities to another.
	for round := range 2 {
		for _, c := range cases {
			got := priorities(t, generated(t, c.proxy, push, reviewsCluster))
			if !mapsEqual(got, c.want) {
				t.Errorf("round %d, proxy in %v: priorities %v, want %v", round, c.proxy.Locality, got, c.want)
			}
			direct := endpoint.BuildLoadAssignment(c.proxy, push, reviewsCluster)
			if !proto.Equal(direct, generated(t, c.proxy, push, reviewsCluster)) {
				t.Errorf("round %d, proxy in %v: cached assignment differs from a fresh one", round, c.proxy.Locality)
			}
		}
	}
}

func TestLocalityDistributeAndDisabled(t *testing.T) {
	v1, v2, v3 := nt.BookinfoPods["reviews-v1"], nt.BookinfoPods["reviews-v2"], nt.BookinfoPods["reviews-v3"]
	distribute := &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
		Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "region1/zone1/*", To: map[string]uint32{"region1/zone1/*": 80, "region2/zone3/*": 20}}},
	}}}
	push := bookinfoLocalities(t, distribute).PushContext()
	weights := func(p *model.Proxy) map[string]uint32 {
		out := map[string]uint32{}
		cla := endpoint.BuildLoadAssignment(p, push, reviewsCluster)
		nt.ValidateRecursively(t, cla)
		for _, g := range cla.GetEndpoints() {
			for _, e := range g.GetLbEndpoints() {
				out[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = g.GetLoadBalancingWeight().GetValue()
			}
		}
		return out
	}
	if got := weights(proxyIn("productpage-v1", "region1", "zone1")); got[v1] != 80 || got[v3] != 20 || got[v2] != 0 {
		t.Errorf("distribute from region1/zone1: weights %v, want v1 80, v3 20, v2 0", got)
	}
	// A proxy no rule matches keeps the plain weights.
	if got := weights(proxyIn("ratings-v1", "region1", "zone2")); got[v1] != 1 || got[v2] != 1 || got[v3] != 1 {
		t.Errorf("no matching rule: weights %v, want 1 each", got)
	}

	// Without outlier detection failover is off: every group priority 0.
	push = bookinfoLocalities(t, nil).PushContext()
	for addr, p := range priorities(t, endpoint.BuildLoadAssignment(proxyIn("productpage-v1", "region1", "zone1"), push, reviewsCluster)) {
		if p != 0 {
			t.Errorf("no outlier detection: %s priority %d, want 0", addr, p)
		}
	}
	// enabled: false turns failover off even with outlier detection.
	off := &networking.TrafficPolicy{
		OutlierDetection: &networking.OutlierDetection{ConsecutiveGatewayErrors: wrapperspb.UInt32(5)},
		LoadBalancer:     &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(false)}},
	}
	push = bookinfoLocalities(t, off).PushContext()
	for addr, p := range priorities(t, endpoint.BuildLoadAssignment(proxyIn("productpage-v1", "region1", "zone1"), push, reviewsCluster)) {
		if p != 0 {
			t.Errorf("locality lb disabled: %s priority %d, want 0", addr, p)
		}
	}
}

func mapsEqual(a, b map[string]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
