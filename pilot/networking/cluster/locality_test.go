package cluster_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

func loc(region, zone, subzone string) *corev3.Locality {
	return &corev3.Locality{Region: region, Zone: zone, SubZone: subzone}
}

// groups returns a load assignment with one endpoint per locality.
func groups(locs ...*corev3.Locality) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: "outbound|9080||reviews.default.svc.cluster.local"}
	for i, l := range locs {
		cla.Endpoints = append(cla.Endpoints, &endpointv3.LocalityLbEndpoints{
			Locality:    l,
			LbEndpoints: []*endpointv3.LbEndpoint{cluster.LbEndpoint("10.0.0."+string(rune('1'+i)), 9080, 1, true)},
		})
	}
	return cla
}

func TestLocalityFailover(t *testing.T) {
	cla := groups(loc("us", "a", "1"), loc("us", "a", "2"), loc("us", "b", ""), loc("eu", "x", ""), loc("ap", "y", ""))
	setting := &networking.LocalityLoadBalancerSetting{Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: "us", To: "eu"}}}
	cluster.ApplyLocalityLB(cla, loc("us", "a", "1"), setting, true)
	// Raw priorities 0,1,2,3 (eu: the failover target),4 (ap) are already gap-free.
	want := []uint32{0, 1, 2, 3, 4}
	for i, g := range cla.Endpoints {
		if g.GetPriority() != want[i] {
			t.Errorf("group %v: priority %d, want %d", g.GetLocality(), g.GetPriority(), want[i])
		}
	}
	nt.ValidateRecursively(t, cla)

	// Gaps are closed: same zone missing → us/b is 1, eu 2.
	cla = groups(loc("us", "a", "1"), loc("us", "b", ""), loc("eu", "x", ""))
	cluster.ApplyLocalityLB(cla, loc("us", "a", "1"), &networking.LocalityLoadBalancerSetting{}, true)
	for i, w := range []uint32{0, 1, 2} {
		if p := cla.Endpoints[i].GetPriority(); p != w {
			t.Errorf("compacted group %d: priority %d, want %d", i, p, w)
		}
	}

	// Without outlier detection (failover false) nothing changes.
	cla = groups(loc("us", "a", "1"), loc("eu", "x", ""))
	cluster.ApplyLocalityLB(cla, loc("us", "a", "1"), &networking.LocalityLoadBalancerSetting{}, false)
	if cla.Endpoints[1].GetPriority() != 0 {
		t.Errorf("failover applied without outlier detection")
	}
	// enabled: false turns it off.
	cluster.ApplyLocalityLB(cla, loc("us", "a", "1"), &networking.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(false)}, true)
	if cla.Endpoints[1].GetPriority() != 0 {
		t.Errorf("failover applied with enabled: false")
	}
}

func TestLocalityDistribute(t *testing.T) {
	cla := groups(loc("region1", "a", ""), loc("region1", "b", ""), loc("region2", "c", ""), loc("region3", "d", ""))
	cla.Endpoints[1].LoadBalancingWeight = wrapperspb.UInt32(3)
	setting := &networking.LocalityLoadBalancerSetting{Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{
		{From: "region9/*", To: map[string]uint32{"region3/*": 100}},
		{From: "region1/*", To: map[string]uint32{"region1/*": 80, "region2/*": 20}},
	}}
	cluster.ApplyLocalityLB(cla, loc("region1", "a", ""), setting, false)
	// region1's 80 is split 1:3 between its zones; region3 matches nothing and is emptied.
	wantWeight := []uint32{20, 60, 20}
	for i, w := range wantWeight {
		if got := cla.Endpoints[i].GetLoadBalancingWeight().GetValue(); got != w {
			t.Errorf("group %d: weight %d, want %d", i, got, w)
		}
	}
	if n := len(cla.Endpoints[3].GetLbEndpoints()); n != 0 {
		t.Errorf("unmatched locality keeps %d endpoints", n)
	}
}

func TestLocalityMatch(t *testing.T) {
	l := loc("us", "a", "1")
	for pattern, want := range map[string]bool{
		"us": true, "us/*": true, "us/a": true, "us/a/1": true, "*": true, "*/a/*": true,
		"eu": false, "us/b": false, "us/a/2": false,
	} {
		if got := cluster.LocalityMatch(l, pattern); got != want {
			t.Errorf("LocalityMatch(us/a/1, %q) = %v, want %v", pattern, got, want)
		}
	}
}

func TestEffectivePolicy(t *testing.T) {
	rr := &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN}}
	rnd := &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_RANDOM}}
	od := &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(3)}
	tls := &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}
	rule := &networking.DestinationRule{
		TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer: rr, OutlierDetection: od, Tls: tls,
			PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{Port: &networking.PortSelector{Number: 81}, LoadBalancer: rnd}},
		},
		Subsets: []*networking.Subset{
			{Name: "a", TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: rnd}},
			{Name: "b"},
		},
	}
	cases := []struct {
		subset string
		port   uint32
		lb     *networking.LoadBalancerSettings
		od     *networking.OutlierDetection
		tls    *networking.ClientTLSSettings
	}{
		{"", 80, rr, od, tls},
		{"", 81, rnd, nil, nil}, // port level replaces all four
		{"a", 80, rnd, od, tls}, // subset overrides field by field
		{"a", 81, rnd, nil, nil},
		{"b", 80, rr, od, tls},
		{"missing", 80, rr, od, tls},
	}
	for _, c := range cases {
		p := cluster.EffectivePolicy(rule, c.subset, c.port)
		if p.GetLoadBalancer() != c.lb || p.GetOutlierDetection() != c.od || p.GetTls() != c.tls {
			t.Errorf("subset %q port %d: lb %v od %v tls %v", c.subset, c.port, p.GetLoadBalancer(), p.GetOutlierDetection(), p.GetTls())
		}
	}
	if p := cluster.EffectivePolicy(nil, "", 80); p != nil {
		t.Errorf("nil rule: %v", p)
	}
}
