package endpoint_test

import (
	"fmt"
	"slices"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

const tlsModeLabel = "security.istio.io/tlsMode"

// networkEndpoint is an http endpoint at ip on network nw; mtls gives it
// the sidecar's tlsMode label.
func networkEndpoint(ip, nw string, mtls bool, weight uint32) *model.Endpoint {
	labels := map[string]string{"app": "reviews"}
	if mtls {
		labels[tlsModeLabel] = "istio"
	}
	e := nt.Endpoint(ip, 9080, "http", labels)
	e.Network, e.Weight = nw, weight
	return e
}

// twoGateways is meshNetworks with network n2 behind two gateways and n3
// behind one, and n4 declared without any.
func twoGateways() *meshconfig.MeshNetworks {
	return &meshconfig.MeshNetworks{Networks: map[string]*meshconfig.Network{
		"n2": {Gateways: []*meshconfig.Network_IstioNetworkGateway{
			{Gw: &meshconfig.Network_IstioNetworkGateway_Address{Address: "192.0.2.2"}, Port: 15443},
			{Gw: &meshconfig.Network_IstioNetworkGateway_Address{Address: "192.0.2.1"}, Port: 15443},
		}},
		"n3": {Gateways: []*meshconfig.Network_IstioNetworkGateway{
			{Gw: &meshconfig.Network_IstioNetworkGateway_Address{Address: "192.0.2.3"}, Port: 15443},
		}},
		"n4": {},
	}}
}

// summary renders endpoints as "address:port/weight" for comparison.
func summary(eps []*model.Endpoint) []string {
	out := make([]string, 0, len(eps))
	for _, e := range eps {
		out = append(out, fmt.Sprintf("%s:%d/%d", e.Address, e.Port, e.Weight))
	}
	return out
}

// TestSplitHorizon is the table of istiod's EndpointsByNetworkFilter: own
// network, no network and gateway-less networks direct; other networks
// through their gateways, weighed by their healthy mTLS endpoints and split
// evenly; every weight scaled by the lcm of the gateway counts (2).
func TestSplitHorizon(t *testing.T) {
	gws := model.BuildNetworkGateways(twoGateways(), nil)
	if got := gws.ScaleFactor(); got != 2 {
		t.Fatalf("scale factor %d, want 2 (lcm of 2 and 1 gateways)", got)
	}
	eps := []*model.Endpoint{
		networkEndpoint("10.0.1.1", "n1", true, 0),
		networkEndpoint("10.0.0.1", "", false, 0),
		networkEndpoint("10.0.2.1", "n2", true, 0),
		networkEndpoint("10.0.2.2", "n2", true, 3),
		networkEndpoint("10.0.2.3", "n2", false, 0), // no mTLS: dropped
		networkEndpoint("10.0.3.1", "n3", true, 0),
		networkEndpoint("10.0.4.1", "n4", true, 0), // no gateway: direct
		networkEndpoint("10.0.5.1", "n5", true, 0), // undeclared: direct
	}
	unhealthy := networkEndpoint("10.0.2.4", "n2", true, 0)
	unhealthy.Healthy = false
	eps = append(eps, unhealthy)
	cases := []struct {
		network string
		want    []string
	}{
		{"n1", []string{
			"10.0.1.1:9080/2", "10.0.0.1:9080/2", "10.0.4.1:9080/2", "10.0.5.1:9080/2",
			// n2: (1+3)*2 = 8 split over two gateways; n3: 1*2 on one.
			"192.0.2.1:15443/4", "192.0.2.2:15443/4", "192.0.2.3:15443/2",
		}},
		{"n2", []string{
			// n1 has no gateway: its endpoint is direct.
			"10.0.1.1:9080/2", "10.0.0.1:9080/2", "10.0.2.1:9080/2", "10.0.2.2:9080/6", "10.0.2.3:9080/2",
			"10.0.4.1:9080/2", "10.0.5.1:9080/2", "10.0.2.4:9080/2",
			"192.0.2.3:15443/2",
		}},
	}
	for _, tc := range cases {
		got := summary(endpoint.SplitHorizon(tc.network, gws, eps))
		if !slices.Equal(got, tc.want) {
			t.Errorf("proxy on %s: got %v, want %v", tc.network, got, tc.want)
		}
	}
	if got := endpoint.SplitHorizon("", gws, eps); len(got) != len(eps) {
		t.Errorf("proxy without network: %d endpoints, want all %d direct", len(got), len(eps))
	}
	if got := endpoint.SplitHorizon("n1", model.BuildNetworkGateways(nil, nil), eps); !slices.Equal(got, eps) {
		t.Errorf("no gateways: endpoints changed: %v", summary(got))
	}
	if eps[3].Weight != 3 {
		t.Errorf("input endpoint changed: weight %d, want 3", eps[3].Weight)
	}
}

// networkProxy is productpage-v1's sidecar on network nw, its labels
// carrying the network as ParseProxy gives them from ISTIO_META_NETWORK.
func networkProxy(nw string) *model.Proxy {
	p := nt.BookinfoProxy("productpage-v1")
	p.Metadata.Network = nw
	if nw != "" {
		p.Metadata.Labels[model.LabelTopologyNetwork] = nw
	}
	return p
}

// lbEndpoints renders an assignment as "address:port/weight" per endpoint,
// in order, and checks it with ValidateAll.
func lbEndpoints(t *testing.T, cla *endpointv3.ClusterLoadAssignment) []string {
	t.Helper()
	nt.ValidateRecursively(t, cla)
	var out []string
	for _, g := range cla.GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d/%d", a.GetAddress(), a.GetPortValue(), e.GetLoadBalancingWeight().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}

// TestSplitHorizonEDS: the sidecar EDS generator gives each proxy its own
// network's endpoints and the other networks' gateways, weighted; gateway
// endpoints carry tlsMode istio (auto mTLS to the gateway); the cache
// keeps one assignment per network, equal to a fresh build.
func TestSplitHorizonEDS(t *testing.T) {
	in := nt.Bookinfo(t)
	in.MeshNetworks = twoGateways()
	subsetV2 := networkEndpoint("10.0.2.1", "n2", true, 0)
	subsetV2.Labels["version"] = "v2"
	in.Endpoints[reviewsHost] = []*model.Endpoint{
		networkEndpoint("10.0.1.1", "n1", true, 0),
		subsetV2,
		networkEndpoint("10.0.2.2", "n2", true, 0),
		networkEndpoint("10.0.2.3", "n2", true, 0),
		networkEndpoint("10.0.2.4", "n2", false, 0),
	}
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	push := in.PushContext()
	cases := []struct {
		network string
		want    []string
	}{
		// Three n2 endpoints with mTLS, weight 2 each after scaling: 3 per gateway.
		{"n1", []string{"10.0.1.1:9080/2", "192.0.2.1:15443/3", "192.0.2.2:15443/3"}},
		{"n2", []string{"10.0.1.1:9080/2", "10.0.2.1:9080/2", "10.0.2.2:9080/2", "10.0.2.3:9080/2", "10.0.2.4:9080/2"}},
		{"", []string{"10.0.1.1:9080/2", "10.0.2.1:9080/2", "10.0.2.2:9080/2", "10.0.2.3:9080/2", "10.0.2.4:9080/2"}},
	}
	for round := range 2 { // the second round is served from the cache
		for _, tc := range cases {
			p := networkProxy(tc.network)
			cla := generated(t, p, push, reviewsCluster)
			if got := lbEndpoints(t, cla); !slices.Equal(got, tc.want) {
				t.Errorf("round %d, proxy on %q: endpoints %v, want %v", round, tc.network, got, tc.want)
			}
			if !proto.Equal(cla, endpoint.BuildLoadAssignment(p, push, reviewsCluster)) {
				t.Errorf("round %d, proxy on %q: cached assignment differs from a fresh one", round, tc.network)
			}
		}
	}
	if n := in.Cache.Len(); n != len(cases) {
		t.Errorf("cache holds %d assignments for proxies on %d networks, want %d", n, len(cases), len(cases))
	}
	// Subset v2 (10.0.2.1 only): the gateway stands in for it alone.
	const v2Cluster = "outbound|9080|v2|" + reviewsHost
	got := lbEndpoints(t, generated(t, networkProxy("n1"), push, v2Cluster))
	if want := []string{"192.0.2.1:15443/1", "192.0.2.2:15443/1"}; !slices.Equal(got, want) {
		t.Errorf("subset v2 for a proxy on n1: endpoints %v, want %v", got, want)
	}
	cla := endpoint.BuildLoadAssignment(networkProxy("n1"), push, reviewsCluster)
	for _, g := range cla.GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			if e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue() != 15443 {
				continue
			}
			mode := e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue()
			if mode != "istio" {
				t.Errorf("gateway endpoint %v: tlsMode %q, want istio", e.GetEndpoint().GetAddress(), mode)
			}
		}
	}
}

// TestFailoverPriorityRealNetwork: failoverPriority on
// topology.istio.io/network compares the endpoints' resolved network (no
// label needed) and the proxy's; a gateway stands in at its network's
// level, so the proxy's own network is preferred and the gateway is the
// failover.
func TestFailoverPriorityRealNetwork(t *testing.T) {
	local := networkEndpoint("10.0.1.1", "n1", true, 0)
	remote := networkEndpoint("10.0.3.1", "n3", true, 0)
	local.Locality, remote.Locality = "r1/z1/s1", "r1/z1/s1"
	in := failoverPriorityInput(t, "failover-priority-topology.yaml", local, remote)
	in.MeshNetworks = twoGateways()
	push := in.PushContext()
	got := priorities(t, generated(t, networkProxy("n1"), push, reviewsCluster))
	want := map[string]uint32{"10.0.1.1": 0, "192.0.2.3": 1}
	if !mapsEqual(got, want) {
		t.Errorf("proxy on n1: priorities %v, want %v", got, want)
	}
	// Without gateways both are direct, and the network still orders them.
	in.MeshNetworks = nil
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	got = priorities(t, generated(t, networkProxy("n3"), in.PushContext(), reviewsCluster))
	want = map[string]uint32{"10.0.3.1": 0, "10.0.1.1": 1}
	if !mapsEqual(got, want) {
		t.Errorf("proxy on n3, no gateways: priorities %v, want %v", got, want)
	}
}
