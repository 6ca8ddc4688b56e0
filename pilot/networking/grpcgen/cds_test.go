package grpcgen

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// trafficPolicyPush is Bookinfo with the cluster package's traffic-policy
// DestinationRules instead of destination-rule-all.yaml.
func trafficPolicyPush(t *testing.T) (*model.PushContext, []model.Config) {
	t.Helper()
	file, err := filepath.Abs("../cluster/testdata/traffic-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in := networkingtest.Bookinfo(t)
	kept := in.Configs[:0]
	for _, c := range in.Configs {
		if c.Kind != model.KindDestinationRule {
			kept = append(kept, c)
		}
	}
	drs := networkingtest.LoadConfigs(t, file, "default")
	in.Configs = append(kept, drs...)
	return in.PushContext(), drs
}

func TestClusterTrafficPolicy(t *testing.T) {
	push, _ := trafficPolicyPush(t)
	proxy := networkingtest.BookinfoProxy("productpage-v1")
	proxy.Metadata.Generator = model.GeneratorGRPC
	clusters := generate[*clusterv3.Cluster](t, model.ClusterType, proxy, push)
	get := func(subset, app string) *clusterv3.Cluster {
		name := clusterName(9080, subset, app+".default.svc.cluster.local")
		c := clusters[name]
		if c == nil {
			t.Fatalf("missing cluster %s", name)
		}
		return c
	}
	for _, subset := range []string{"", "v1"} {
		c := get(subset, "reviews")
		if c.GetLbPolicy() != clusterv3.Cluster_RING_HASH || c.GetRingHashLbConfig().GetMinimumRingSize().GetValue() != 2048 ||
			c.GetRingHashLbConfig().GetHashFunction() != clusterv3.Cluster_RingHashLbConfig_XX_HASH {
			t.Errorf("%s: lb %v %v, want RING_HASH xx_hash min 2048", c.Name, c.GetLbPolicy(), c.GetRingHashLbConfig())
		}
		th := c.GetCircuitBreakers().GetThresholds()
		if len(th) != 1 || th[0].GetMaxRequests().GetValue() != 1000 {
			t.Errorf("%s: circuit breakers %v, want max_requests 1000", c.Name, c.GetCircuitBreakers())
		}
		od := c.GetOutlierDetection()
		if od.GetConsecutive_5Xx().GetValue() != 7 || od.GetEnforcingConsecutive_5Xx().GetValue() != 100 || od.GetMaxEjectionPercent().GetValue() != 50 {
			t.Errorf("%s: outlier detection %v", c.Name, od)
		}
	}
	if c := get("v2", "reviews"); c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST {
		t.Errorf("reviews v2: lb %v, want LEAST_REQUEST", c.GetLbPolicy())
	}
	if c := get("v3", "reviews"); c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN || c.GetOutlierDetection() != nil || c.GetCircuitBreakers() != nil {
		t.Errorf("reviews v3 (port-level round robin only): %v", c)
	}
	if c := get("", "ratings"); c.GetLbPolicy() != clusterv3.Cluster_RING_HASH {
		t.Errorf("ratings (maglev): lb %v, want RING_HASH", c.GetLbPolicy())
	}
	for _, c := range []*clusterv3.Cluster{get("", "details"), get("", "productpage")} {
		if c.GetTransportSocket() != nil {
			t.Errorf("%s: transport socket on a proxyless cluster", c.Name)
		}
	}
}

func TestPolicyWarnings(t *testing.T) {
	_, drs := trafficPolicyPush(t)
	byName := map[string][]string{}
	for i := range drs {
		byName[drs[i].Name] = PolicyWarnings(&drs[i])
	}
	want := map[string][]string{
		"reviews": {
			"trafficPolicy.connectionPool.tcp:", "trafficPolicy.connectionPool.http.http1MaxPendingRequests:",
			"trafficPolicy.connectionPool.http.maxRequestsPerConnection:", "trafficPolicy.connectionPool.http.maxRetries:",
			"trafficPolicy.connectionPool.http.idleTimeout:", "trafficPolicy.connectionPool.http.h2UpgradePolicy:",
			"trafficPolicy.connectionPool.http.maxConcurrentStreams:", "trafficPolicy.outlierDetection.minHealthPercent:",
		},
		"ratings": {
			"trafficPolicy.tunnel:", "trafficPolicy.loadBalancer.consistentHash.maglev:",
			"trafficPolicy.loadBalancer.consistentHash.httpCookie:",
			"trafficPolicy.loadBalancer.warmup:", "trafficPolicy.connectionPool.http.useClientProtocol:",
		},
		"details": {"trafficPolicy.tls:", "trafficPolicy.loadBalancer.consistentHash.useSourceIp:"},
		"productpage": {
			"trafficPolicy.loadBalancer.simple: RANDOM", "trafficPolicy.outlierDetection.consecutiveErrors:",
			"trafficPolicy.portLevelSettings[port 9080].loadBalancer.consistentHash.httpQueryParameterName:",
			"trafficPolicy.portLevelSettings[port 9080].tls:",
		},
	}
	for name, fields := range want {
		got := byName[name]
		if len(got) != len(fields) {
			t.Errorf("%s: %d warnings %q, want %d", name, len(got), got, len(fields))
		}
		for _, f := range fields {
			prefix := "DestinationRule default/" + name + ": " + f
			if !slices.ContainsFunc(got, func(w string) bool { return strings.HasPrefix(w, prefix) }) {
				t.Errorf("%s: no warning starting %q in %q", name, prefix, got)
			}
		}
	}
}
