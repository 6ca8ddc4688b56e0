package networkingtest_test

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// TestDestinationRuleWorkloadSelector: a DestinationRule with a
// workloadSelector applies to the selected workloads of its namespace only,
// over the namespace's rule without one, and the shared cache keeps the two
// proxies of one namespace apart (clusters, routes' hash policies).
func TestDestinationRuleWorkloadSelector(t *testing.T) {
	// Bookinfo's own rule "ratings" (subsets, no policy) is the namespace's
	// rule without a selector.
	in := nt.Bookinfo(t)
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	header := func(name string) *networking.LoadBalancerSettings {
		return &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{
			ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
				HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: name},
			},
		}}
	}
	in.Configs = append(in.Configs,
		model.Config{
			Meta: model.Meta{Kind: model.KindDestinationRule, Name: "ratings-reviews-v2", Namespace: "default"},
			Spec: &networking.DestinationRule{
				Host:             "ratings",
				WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "reviews", "version": "v2"}},
				TrafficPolicy:    &networking.TrafficPolicy{LoadBalancer: header("x-v2")},
			},
		},
		// A selector in another namespace never applies to default's workloads.
		model.Config{
			Meta: model.Meta{Kind: model.KindDestinationRule, Name: "ratings-elsewhere", Namespace: "other"},
			Spec: &networking.DestinationRule{
				Host:             "ratings.default.svc.cluster.local",
				WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "reviews"}},
				TrafficPolicy:    &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_RANDOM}}},
			},
		},
	)
	push := in.PushContext()
	ratings := push.ServiceByHost("ratings.default.svc.cluster.local")
	v1, v2 := nt.BookinfoProxy("reviews-v1"), nt.BookinfoProxy("reviews-v2")
	if got := push.DestinationRuleFor(v2, ratings); got == nil || got.Name != "ratings-reviews-v2" {
		t.Errorf("reviews-v2 sees %v, want ratings-reviews-v2", got)
	}
	if got := push.DestinationRuleFor(v1, ratings); got == nil || got.Name != "ratings" {
		t.Errorf("reviews-v1 sees %v, want ratings", got)
	}

	const ratingsCluster = "outbound|9080||ratings.default.svc.cluster.local"
	wantHash := map[*model.Proxy]string{v1: "", v2: "x-v2"}
	wantLB := map[*model.Proxy]clusterv3.Cluster_LbPolicy{v1: clusterv3.Cluster_LEAST_REQUEST, v2: clusterv3.Cluster_RING_HASH}
	// v1 first then v2 then v1 again: each answer must come out of the
	// shared cache unchanged for the proxy it was made for.
	for _, p := range []*model.Proxy{v1, v2, v1, v2} {
		all := generateAll(t, p, push)
		var c clusterv3.Cluster
		if err := proto.Unmarshal(all["cds/"+ratingsCluster], &c); err != nil {
			t.Fatal(err)
		}
		nt.ValidateRecursively(t, &c)
		if c.GetLbPolicy() != wantLB[p] {
			t.Errorf("%s: ratings lb %v, want %v", p.ID, c.GetLbPolicy(), wantLB[p])
		}
		// Only the catch-all rule has subsets.
		if _, ok := all["cds/outbound|9080|v1|ratings.default.svc.cluster.local"]; ok != (p == v1) {
			t.Errorf("%s: subset cluster v1 present %v", p.ID, ok)
		}
		var rc routev3.RouteConfiguration
		if err := proto.Unmarshal(all["rds/9080"], &rc); err != nil {
			t.Fatal(err)
		}
		var got string
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if r.GetRoute().GetCluster() == ratingsCluster {
					for _, hp := range r.GetRoute().GetHashPolicy() {
						got = hp.GetHeader().GetHeaderName()
					}
				}
			}
		}
		if got != wantHash[p] {
			t.Errorf("%s: route to ratings hashes on %q, want %q", p.ID, got, wantHash[p])
		}
	}
	// The sidecar and route generators agree with the uncached builders.
	clusters, err := cluster.Build(v2, push)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		if c.Name == ratingsCluster && c.GetLbPolicy() != clusterv3.Cluster_RING_HASH {
			t.Errorf("Build: %v", c.GetLbPolicy())
		}
	}
	if hp := route.PushHashPolicies(push, v2)("ratings.default.svc.cluster.local", "", 9080); len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != "x-v2" {
		t.Errorf("PushHashPolicies(reviews-v2) = %v", hp)
	}
}
