package cluster

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// applyLB applies loadBalancer to a cluster that balances itself (not an
// ORIGINAL_DST one): simple policies, consistentHash (RING_HASH, or MAGLEV
// when asked) and localityLbSetting.distribute. Unset means LEAST_REQUEST,
// Istio's default.
func applyLB(c *clusterv3.Cluster, lb *networking.LoadBalancerSettings) {
	if ch := lb.GetConsistentHash(); ch != nil {
		applyConsistentHash(c, ch)
	} else {
		switch lb.GetSimple() {
		case networking.LoadBalancerSettings_ROUND_ROBIN:
			c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
			if ss := slowStart(lb); ss != nil {
				c.LbConfig = &clusterv3.Cluster_RoundRobinLbConfig_{RoundRobinLbConfig: &clusterv3.Cluster_RoundRobinLbConfig{SlowStartConfig: ss}}
			}
		case networking.LoadBalancerSettings_RANDOM:
			c.LbPolicy = clusterv3.Cluster_RANDOM
		case networking.LoadBalancerSettings_PASSTHROUGH:
			c.EdsClusterConfig, c.LoadAssignment = nil, nil
			c.DnsLookupFamily, c.RespectDnsTtl = clusterv3.Cluster_AUTO, false
			setOriginalDst(c)
			return
		default: // UNSPECIFIED, LEAST_CONN, LEAST_REQUEST
			c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
			if ss := slowStart(lb); ss != nil {
				c.LbConfig = &clusterv3.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &clusterv3.Cluster_LeastRequestLbConfig{SlowStartConfig: ss}}
			}
		}
	}
	applyLocalityConfig(c, lb.GetLocalityLbSetting())
}

// SlowStartAggressionRuntimeKey is the runtime key of the slow start
// aggression Envoy requires next to its default value.
const SlowStartAggressionRuntimeKey = "upstream.istio.slow_start.aggression"

// slowStart is the slow start config of loadBalancer.warmup (duration,
// aggression, minimumPercent) or, when unset, of the deprecated
// warmupDurationSecs (window only); nil when neither is set. Envoy applies
// it to ROUND_ROBIN and LEAST_REQUEST only, as Istio does.
func slowStart(lb *networking.LoadBalancerSettings) *clusterv3.Cluster_SlowStartConfig {
	if w := lb.GetWarmup(); w != nil {
		ss := &clusterv3.Cluster_SlowStartConfig{}
		if d := w.GetDuration(); d != nil {
			ss.SlowStartWindow = durationpb.New(d.AsDuration())
		}
		if a := w.GetAggression(); a != nil {
			ss.Aggression = &corev3.RuntimeDouble{DefaultValue: a.GetValue(), RuntimeKey: SlowStartAggressionRuntimeKey}
		}
		if p := w.GetMinimumPercent(); p != nil {
			ss.MinWeightPercent = &typev3.Percent{Value: max(0, min(p.GetValue(), 100))}
		}
		return ss
	}
	if d := lb.GetWarmupDurationSecs(); d != nil {
		return &clusterv3.Cluster_SlowStartConfig{SlowStartWindow: durationpb.New(d.AsDuration())}
	}
	return nil
}

// maxRingSize is Envoy's (and grpc-go's) upper bound of a hash ring.
const maxRingSize = 8 * 1024 * 1024

func applyConsistentHash(c *clusterv3.Cluster, ch *networking.LoadBalancerSettings_ConsistentHashLB) {
	if m := ch.GetMaglev(); m != nil {
		c.LbPolicy = clusterv3.Cluster_MAGLEV
		if m.GetTableSize() > 0 {
			c.LbConfig = &clusterv3.Cluster_MaglevLbConfig_{MaglevLbConfig: &clusterv3.Cluster_MaglevLbConfig{
				TableSize: wrapperspb.UInt64(m.GetTableSize()),
			}}
		}
		return
	}
	c.LbPolicy = clusterv3.Cluster_RING_HASH
	if size := RingSize(ch); size > 0 {
		c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{
			MinimumRingSize: wrapperspb.UInt64(size),
		}}
	}
}

// RingSize returns the minimum ring size a consistentHash asks for
// (ringHash.minimumRingSize, else the deprecated top-level field), capped at
// 8M entries; 0 means the proxy's default.
func RingSize(ch *networking.LoadBalancerSettings_ConsistentHashLB) uint64 {
	size := ch.GetRingHash().GetMinimumRingSize()
	if size == 0 {
		size = ch.GetMinimumRingSize()
	}
	return min(size, maxRingSize)
}

// applyLocalityConfig turns on locality-weighted balancing when the setting
// distributes traffic by locality; the weights themselves are endpoint
// properties (see ApplyLocalityLB).
func applyLocalityConfig(c *clusterv3.Cluster, s *networking.LocalityLoadBalancerSetting) {
	if s == nil || (s.GetEnabled() != nil && !s.GetEnabled().GetValue()) || len(s.GetDistribute()) == 0 {
		return
	}
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
	}
	c.CommonLbConfig.LocalityConfigSpecifier = &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
		LocalityWeightedLbConfig: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
	}
}

// HashPolicy returns the route hash policy that goes with the consistentHash
// load balancer of the cluster for (subset, port) of the DestinationRule dr
// (nil for none), or nil when that cluster does not hash. Envoy reads the
// hash key from the route, so the route generator puts this on
// RouteAction.hash_policy of every route to that cluster.
func HashPolicy(dr *model.Config, subset string, port uint32) []*routev3.RouteAction_HashPolicy {
	ch := EffectivePolicyFor(dr, subset, port).GetLoadBalancer().GetConsistentHash()
	if ch == nil {
		return nil
	}
	hp := hashPolicy(ch)
	if hp == nil {
		return nil
	}
	return []*routev3.RouteAction_HashPolicy{hp}
}

func hashPolicy(ch *networking.LoadBalancerSettings_ConsistentHashLB) *routev3.RouteAction_HashPolicy {
	switch key := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
			Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: key.HttpHeaderName},
		}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		cookie := &routev3.RouteAction_HashPolicy_Cookie{Name: key.HttpCookie.GetName(), Path: key.HttpCookie.GetPath()}
		for _, a := range key.HttpCookie.GetAttributes() {
			cookie.Attributes = append(cookie.Attributes, &routev3.RouteAction_HashPolicy_CookieAttribute{Name: a.GetName(), Value: a.GetValue()})
		}
		if ttl := key.HttpCookie.GetTtl(); ttl != nil {
			cookie.Ttl = durationpb.New(ttl.AsDuration())
		}
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{Cookie: cookie}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{
			ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: key.UseSourceIp},
		}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_QueryParameter_{
			QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: key.HttpQueryParameterName},
		}}
	}
	return nil
}
