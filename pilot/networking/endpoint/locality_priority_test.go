package endpoint_test

import (
	"path/filepath"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

const networkLabel = "topology.istio.io/network"

// priorityEndpoint is a reviews endpoint at ip in locality with labels.
func priorityEndpoint(ip, locality string, labels map[string]string) *model.Endpoint {
	labels["app"] = "reviews"
	e := nt.Endpoint(ip, 9080, "http", labels)
	e.Locality = locality
	return e
}

// failoverPriorityInput is Bookinfo with the reviews DestinationRule of
// testdata/file and the given reviews endpoints, with an EDS cache.
func failoverPriorityInput(t *testing.T, file string, eps ...*model.Endpoint) nt.Input {
	t.Helper()
	in := nt.Bookinfo(t)
	kept := in.Configs[:0]
	for _, c := range in.Configs {
		if c.Kind != model.KindDestinationRule {
			kept = append(kept, c)
		}
	}
	path, err := filepath.Abs(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	in.Configs = append(kept, nt.LoadConfigs(t, path, "default")...)
	in.Endpoints[reviewsHost] = eps
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	return in
}

// labelledProxy is productpage-v1's sidecar in locality with extra labels.
func labelledProxy(locality string, labels map[string]string) *model.Proxy {
	p := nt.BookinfoProxy("productpage-v1")
	p.Locality = model.ParseLocality(locality)
	for k, v := range labels {
		p.Metadata.Labels[k] = v
	}
	return p
}

// TestFailoverPriorityTopology: Istio's failoverPriority example (network,
// region, zone, subzone) puts each endpoint at the level of the longest
// prefix of those labels it shares with the proxy, splitting a locality
// whose endpoints differ in network; region, zone and subzone come from
// the localities, the network from labels.
func TestFailoverPriorityTopology(t *testing.T) {
	const a, b, c, d, e = "10.9.0.1", "10.9.0.2", "10.9.0.3", "10.9.0.4", "10.9.0.5"
	in := failoverPriorityInput(t, "failover-priority-topology.yaml",
		priorityEndpoint(a, "r1/z1/s1", map[string]string{networkLabel: "n1"}),
		priorityEndpoint(b, "r1/z1/s2", map[string]string{networkLabel: "n1"}),
		priorityEndpoint(c, "r1/z2/s1", map[string]string{networkLabel: "n1"}),
		priorityEndpoint(d, "r2/z1/s1", map[string]string{networkLabel: "n1"}),
		priorityEndpoint(e, "r1/z1/s1", map[string]string{networkLabel: "n2"}),
	)
	push := in.PushContext()
	cases := []struct {
		name  string
		proxy *model.Proxy
		want  map[string]uint32
	}{
		{"n1 r1/z1/s1", labelledProxy("r1/z1/s1", map[string]string{networkLabel: "n1"}), map[string]uint32{a: 0, b: 1, c: 2, d: 3, e: 4}},
		// Only e shares the network: everything else is at the lowest level.
		{"n2 r1/z1/s1", labelledProxy("r1/z1/s1", map[string]string{networkLabel: "n2"}), map[string]uint32{a: 1, b: 1, c: 1, d: 1, e: 0}},
		// A proxy label wins over its locality: region r2 from the label.
		{"n1 region label r2", labelledProxy("r1/z1/s1", map[string]string{networkLabel: "n1", "topology.kubernetes.io/region": "r2"}), map[string]uint32{a: 1, b: 1, c: 1, d: 0, e: 2}},
	}
	for round := range 2 { // the second round is served from the cache
		for _, tc := range cases {
			cla := generated(t, tc.proxy, push, reviewsCluster)
			if got := priorities(t, cla); !mapsEqual(got, tc.want) {
				t.Errorf("round %d, proxy %s: priorities %v, want %v", round, tc.name, got, tc.want)
			}
			if !proto.Equal(cla, endpoint.BuildLoadAssignment(tc.proxy, push, reviewsCluster)) {
				t.Errorf("round %d, proxy %s: cached assignment differs from a fresh one", round, tc.name)
			}
		}
	}

	// r1/z1/s1 holds a (n1) and e (n2): two groups of the same locality at
	// different priorities, each weighing its own endpoints.
	cla := endpoint.BuildLoadAssignment(cases[0].proxy, push, reviewsCluster)
	var split []uint32
	for _, g := range cla.GetEndpoints() {
		if proto.Equal(g.GetLocality(), &corev3.Locality{Region: "r1", Zone: "z1", SubZone: "s1"}) {
			split = append(split, g.GetPriority())
			if len(g.GetLbEndpoints()) != 1 || g.GetLoadBalancingWeight().GetValue() != 1 {
				t.Errorf("group r1/z1/s1 priority %d: %d endpoints weighing %d, want 1 weighing 1", g.GetPriority(), len(g.GetLbEndpoints()), g.GetLoadBalancingWeight().GetValue())
			}
		}
	}
	if len(split) != 2 || split[0] != 0 || split[1] != 4 {
		t.Errorf("locality r1/z1/s1 split into priorities %v, want [0 4]", split)
	}
}

// TestFailoverPriorityOverride: Istio's second example ("version=v1",
// "topology.istio.io/cluster=clusterA") compares endpoints with the given
// values, not the proxy's; the failover rule then orders each level by
// locality (own region, the failover target r2, other regions).
func TestFailoverPriorityOverride(t *testing.T) {
	const a, b, c, d, e = "10.9.0.1", "10.9.0.2", "10.9.0.3", "10.9.0.4", "10.9.0.5"
	const clusterLabel = "topology.istio.io/cluster"
	in := failoverPriorityInput(t, "failover-priority-override.yaml",
		priorityEndpoint(a, "r1/z1", map[string]string{"version": "v1", clusterLabel: "clusterA"}),
		priorityEndpoint(b, "r1/z1", map[string]string{"version": "v1", clusterLabel: "clusterB"}),
		priorityEndpoint(c, "r2/z1", map[string]string{"version": "v1", clusterLabel: "clusterB"}),
		priorityEndpoint(d, "r3/z1", map[string]string{"version": "v1", clusterLabel: "clusterB"}),
		priorityEndpoint(e, "r1/z1", map[string]string{"version": "v2", clusterLabel: "clusterA"}),
	)
	push := in.PushContext()
	want := map[string]uint32{a: 0, b: 1, c: 2, d: 3, e: 4}
	for _, labels := range []map[string]string{{clusterLabel: "clusterB"}, {clusterLabel: "clusterA"}} {
		p := labelledProxy("r1/z1", labels)
		if got := priorities(t, generated(t, p, push, reviewsCluster)); !mapsEqual(got, want) {
			t.Errorf("proxy labels %v: priorities %v, want %v", labels, got, want)
		}
	}
	// Both proxies share one entry: overridden labels are not in the key.
	if n := in.Cache.Len(); n != 1 {
		t.Errorf("cache holds %d entries for two proxies differing only in overridden labels, want 1", n)
	}
}

// TestFailoverPriorityCacheKey: the EDS cache separates proxies whose
// values of the failoverPriority labels differ and shares one assignment
// between proxies that differ only in other labels.
func TestFailoverPriorityCacheKey(t *testing.T) {
	in := failoverPriorityInput(t, "failover-priority-topology.yaml",
		priorityEndpoint("10.9.0.1", "r1/z1/s1", map[string]string{networkLabel: "n1"}),
		priorityEndpoint("10.9.0.2", "r1/z1/s1", map[string]string{networkLabel: "n2"}),
	)
	push := in.PushContext()
	n1 := labelledProxy("r1/z1/s1", map[string]string{networkLabel: "n1"})
	n1Other := labelledProxy("r1/z1/s1", map[string]string{networkLabel: "n1", "team": "other"})
	n1Other.Metadata.Labels["version"] = "v9"
	n2 := labelledProxy("r1/z1/s1", map[string]string{networkLabel: "n2"})

	first := priorities(t, generated(t, n1, push, reviewsCluster))
	if got := priorities(t, generated(t, n1Other, push, reviewsCluster)); !mapsEqual(got, first) || in.Cache.Len() != 1 {
		t.Errorf("same network, other labels: priorities %v (first %v), %d cache entries, want equal and 1", got, first, in.Cache.Len())
	}
	got := priorities(t, generated(t, n2, push, reviewsCluster))
	if in.Cache.Len() != 2 {
		t.Errorf("other network: %d cache entries, want 2", in.Cache.Len())
	}
	if got["10.9.0.2"] != 0 || got["10.9.0.1"] != 1 {
		t.Errorf("proxy on n2: priorities %v, want 10.9.0.2 at 0 and 10.9.0.1 at 1", got)
	}
}
