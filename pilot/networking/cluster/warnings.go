package cluster

import (
	"fmt"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// PolicyAt is one traffic policy written in a DestinationRule and where:
// Path is "trafficPolicy", "trafficPolicy.portLevelSettings[port 9080]",
// "subsets[v2].trafficPolicy" and so on. A port-level entry carries only
// loadBalancer, connectionPool, outlierDetection and tls.
type PolicyAt struct {
	Path   string
	Policy *networking.TrafficPolicy
}

// Policies lists every traffic policy of rule: the rule's, its port-level
// entries, then each subset's and their port-level entries.
func Policies(rule *networking.DestinationRule) []PolicyAt {
	var out []PolicyAt
	add := func(path string, p *networking.TrafficPolicy) {
		if p == nil {
			return
		}
		out = append(out, PolicyAt{Path: path, Policy: p})
		for _, pls := range p.GetPortLevelSettings() {
			out = append(out, PolicyAt{
				Path: fmt.Sprintf("%s.portLevelSettings[port %d]", path, pls.GetPort().GetNumber()),
				Policy: &networking.TrafficPolicy{
					LoadBalancer: pls.GetLoadBalancer(), ConnectionPool: pls.GetConnectionPool(),
					OutlierDetection: pls.GetOutlierDetection(), Tls: pls.GetTls(),
				},
			})
		}
	}
	add("trafficPolicy", rule.GetTrafficPolicy())
	for _, s := range rule.GetSubsets() {
		add("subsets["+s.GetName()+"].trafficPolicy", s.GetTrafficPolicy())
	}
	return out
}

// Warnings names every field of the DestinationRule dr that the sidecar
// clusters do not carry out, one message each ("DestinationRule default/x:
// trafficPolicy.tunnel: not supported, ignored"). nil dr has none.
func Warnings(dr *model.Config) []string {
	if dr == nil {
		return nil
	}
	rule, _ := dr.Spec.(*networking.DestinationRule)
	var out []string
	for _, pa := range Policies(rule) {
		for _, w := range unsupported(pa.Policy) {
			out = append(out, fmt.Sprintf("DestinationRule %s/%s: %s.%s", dr.Namespace, dr.Name, pa.Path, w))
		}
	}
	return out
}

// unsupported lists "field: why" for the fields of p the sidecar generators ignore.
func unsupported(p *networking.TrafficPolicy) []string {
	var out []string
	add := func(set bool, field, why string) {
		if set {
			out = append(out, field+": "+why)
		}
	}
	const ignored = "not supported, ignored"
	add(p.GetTunnel() != nil, "tunnel", ignored)
	add(p.GetProxyProtocol() != nil, "proxyProtocol", ignored)
	add(p.GetRetryBudget() != nil, "retryBudget", ignored)
	lb := p.GetLoadBalancer()
	add(lb.GetWarmupDurationSecs() != nil, "loadBalancer.warmupDurationSecs", ignored)
	add(lb.GetWarmup() != nil, "loadBalancer.warmup", ignored)
	add(lb.GetZoneAwareLbSetting() != nil, "loadBalancer.zoneAwareLbSetting", ignored)
	add(len(lb.GetConsistentHash().GetHttpCookie().GetAttributes()) > 0, "loadBalancer.consistentHash.httpCookie.attributes", ignored)
	loc := lb.GetLocalityLbSetting()
	add(len(loc.GetDistribute()) > 0, "loadBalancer.localityLbSetting.distribute",
		"partial: the cluster turns on locality-weighted balancing, the per-locality weights are not yet applied to EDS endpoints")
	add(len(loc.GetFailover()) > 0, "loadBalancer.localityLbSetting.failover",
		"partial: locality priorities are not yet applied to EDS endpoints")
	add(len(loc.GetFailoverPriority()) > 0, "loadBalancer.localityLbSetting.failoverPriority", ignored)
	add(p.GetConnectionPool().GetTcp().GetIdleTimeout() != nil, "connectionPool.tcp.idleTimeout", ignored)
	od := p.GetOutlierDetection()
	add(od.GetConsecutiveErrors() != 0, "outlierDetection.consecutiveErrors", "deprecated and ignored; use consecutive5xxErrors")
	add(len(od.GetOutlierDetectionHttpErrorCodes()) > 0, "outlierDetection.outlierDetectionHttpErrorCodes", ignored)
	add(p.GetTls().GetCaCrl() != "", "tls.caCrl", ignored)
	return out
}
