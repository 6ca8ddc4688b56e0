package cluster_test

import (
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// TestFailoverPriorityApply: endpoints of one locality with different
// label values are split into groups by level, weighing the sum of their
// endpoints, and the levels are renumbered without gaps.
func TestFailoverPriorityApply(t *testing.T) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: "outbound|9080||reviews.default.svc.cluster.local", Endpoints: []*endpointv3.LocalityLbEndpoints{
		{Locality: loc("r1", "z1", ""), LoadBalancingWeight: wrapperspb.UInt32(6), LbEndpoints: []*endpointv3.LbEndpoint{
			cluster.LbEndpoint("10.0.0.1", 80, 2, true), cluster.LbEndpoint("10.0.0.2", 80, 3, true), cluster.LbEndpoint("10.0.0.3", 80, 1, true),
		}},
		{Locality: loc("r2", "z1", ""), LoadBalancingWeight: wrapperspb.UInt32(1), LbEndpoints: []*endpointv3.LbEndpoint{
			cluster.LbEndpoint("10.0.0.4", 80, 1, true),
		}},
	}}
	labels := [][]map[string]string{
		{{"version": "v1", "tier": "gold"}, {"version": "v2"}, {"version": "v1", "tier": "gold"}},
		{{"version": "v1"}},
	}
	lb := &cluster.LocalityLB{Setting: &networking.LocalityLoadBalancerSetting{FailoverPriority: []string{"version", "tier", "topology.kubernetes.io/region"}}, Failover: true}
	lb.Apply(cla, loc("r1", "z9", ""), map[string]string{"version": "v1", "tier": "gold"}, labels)
	nt.ValidateRecursively(t, cla)
	// Raw levels: .1 and .3 match all three (0), .2 differs on version
	// (3), .4 differs on tier (2); renumbered 0, 2, 1.
	type group struct {
		addrs    string
		priority uint32
		weight   uint32
	}
	want := []group{{"10.0.0.1 10.0.0.3", 0, 3}, {"10.0.0.2", 2, 3}, {"10.0.0.4", 1, 1}}
	if len(cla.Endpoints) != len(want) {
		t.Fatalf("%d groups, want %d: %v", len(cla.Endpoints), len(want), cla.Endpoints)
	}
	for i, g := range cla.Endpoints {
		addrs := ""
		for _, e := range g.GetLbEndpoints() {
			if addrs != "" {
				addrs += " "
			}
			addrs += e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
		}
		got := group{addrs, g.GetPriority(), g.GetLoadBalancingWeight().GetValue()}
		if got != want[i] {
			t.Errorf("group %d: %+v, want %+v", i, got, want[i])
		}
	}

	// Without failover (no outlier detection) nothing changes.
	cla = groups(loc("r1", "z1", ""), loc("r2", "z1", ""))
	lb.Failover = false
	lb.Apply(cla, loc("r1", "z1", ""), map[string]string{"version": "v1"}, nil)
	if len(cla.Endpoints) != 2 || cla.Endpoints[0].GetPriority() != 0 || cla.Endpoints[1].GetPriority() != 0 {
		t.Errorf("failoverPriority applied without outlier detection: %v", cla.Endpoints)
	}
}

func TestLocalityLabel(t *testing.T) {
	l := loc("r1", "z1", "s1")
	cases := []struct {
		labels map[string]string
		key    string
		want   string
	}{
		{nil, cluster.LabelTopologyRegion, "r1"},
		{nil, cluster.LabelTopologyZone, "z1"},
		{nil, cluster.LabelTopologySubzone, "s1"},
		{map[string]string{cluster.LabelTopologyZone: "z7"}, cluster.LabelTopologyZone, "z7"},
		{map[string]string{"app": "x"}, "app", "x"},
		{nil, "topology.istio.io/network", ""},
	}
	for _, c := range cases {
		if got := cluster.LocalityLabel(c.labels, l, c.key); got != c.want {
			t.Errorf("LocalityLabel(%v, r1/z1/s1, %s) = %q, want %q", c.labels, c.key, got, c.want)
		}
	}
}

func TestLocalityLBForAndScope(t *testing.T) {
	od := &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(3)}
	dr := func(p *networking.TrafficPolicy) *model.Config {
		return &model.Config{Meta: model.Meta{Kind: model.KindDestinationRule, Name: "r", Namespace: "default"}, Spec: &networking.DestinationRule{Host: "r", TrafficPolicy: p}}
	}
	if lb := cluster.LocalityLBFor(nil, dr(&networking.TrafficPolicy{}), "", 80); lb != nil {
		t.Errorf("no outlier detection nor distribute: %v, want nil", lb)
	}
	fp := &networking.LocalityLoadBalancerSetting{FailoverPriority: []string{"topology.istio.io/network", "version=v1", cluster.LabelTopologyZone}}
	withFP := dr(&networking.TrafficPolicy{OutlierDetection: od, LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: fp}})
	lb := cluster.LocalityLBFor(nil, withFP, "", 80)
	if !lb.UsesLabels() {
		t.Fatalf("failoverPriority with outlier detection: %v does not use labels", lb)
	}
	got := lb.Scope(loc("r1", "z1", ""), map[string]string{"topology.istio.io/network": "n1", "version": "v2"})
	if want := "locality:r1/z1/|topology.istio.io/network=n1|topology.kubernetes.io/zone=z1"; got != want {
		t.Errorf("scope %q, want %q", got, want)
	}
	// The mesh-wide setting applies when the rule has none.
	if lb := cluster.LocalityLBFor(fp, dr(&networking.TrafficPolicy{OutlierDetection: od}), "", 80); !lb.UsesLabels() {
		t.Errorf("mesh failoverPriority: %v does not use labels", lb)
	}
	if s := (*cluster.LocalityLB)(nil).Scope(loc("r1", "", ""), nil); s != "" {
		t.Errorf("nil scope %q", s)
	}
}
