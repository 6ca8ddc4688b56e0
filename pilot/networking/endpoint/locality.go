package endpoint

import (
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// localityLB is the locality load balancing of one cluster: the setting
// and whether failover is on (Istio needs outlier detection for it).
type localityLB struct {
	setting  *networking.LocalityLoadBalancerSetting
	failover bool
}

// localitySetting is the locality load balancing of the cluster of subset
// and port under dr, as Istio chooses it: the effective policy's
// localityLbSetting, else the mesh's, else Istio's default (enabled, no
// rules); a setting with enabled false turns it off. It is nil when it
// would change nothing: no distribute rules and no outlier detection.
func localitySetting(push *model.PushContext, dr *model.Config, subset string, port uint32) *localityLB {
	policy := cluster.EffectivePolicyFor(dr, subset, port)
	s := policy.GetLoadBalancer().GetLocalityLbSetting()
	if s == nil {
		s = push.Mesh.GetLocalityLbSetting()
	}
	if s.GetEnabled() != nil && !s.GetEnabled().GetValue() {
		return nil
	}
	failover := policy.GetOutlierDetection() != nil
	if len(s.GetDistribute()) == 0 && !failover {
		// The common case, on every EDS cache lookup: allocate nothing.
		return nil
	}
	if s == nil {
		s = &networking.LocalityLoadBalancerSetting{}
	}
	return &localityLB{setting: s, failover: failover}
}

// apply rewrites cla, an assignment built for this proxy alone, for the
// proxy's locality.
func (l *localityLB) apply(cla *endpointv3.ClusterLoadAssignment, proxy *model.Proxy) {
	if l == nil {
		return
	}
	cluster.ApplyLocalityLB(cla, proxy.Locality, l.setting, l.failover)
}

// scope is the cache scope of an assignment: the proxy's locality when
// locality load balancing applies ("region/zone/subzone"), else "".
func (l *localityLB) scope(proxy *model.Proxy) string {
	if l == nil {
		return ""
	}
	loc := proxy.Locality
	return "locality:" + loc.GetRegion() + "/" + loc.GetZone() + "/" + loc.GetSubZone()
}
