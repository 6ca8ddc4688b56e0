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
	return PolicyWarnings(dr, unsupported)
}

// PolicyWarnings runs check on every traffic policy of the DestinationRule
// dr (see Policies) and prefixes each "field: why" it returns with the
// rule and the policy's path: "DestinationRule ns/name: path.field: why".
// nil dr has none.
func PolicyWarnings(dr *model.Config, check func(*networking.TrafficPolicy) Notes) []string {
	if dr == nil {
		return nil
	}
	rule, _ := dr.Spec.(*networking.DestinationRule)
	var out []string
	for _, pa := range Policies(rule) {
		for _, w := range check(pa.Policy) {
			out = append(out, fmt.Sprintf("DestinationRule %s/%s: %s.%s", dr.Namespace, dr.Name, pa.Path, w))
		}
	}
	return out
}

// Notes collects the "field: why" notes of a PolicyWarnings check.
type Notes []string

// Add notes field, for reason why, when set.
func (n *Notes) Add(set bool, field, why string) {
	if set {
		*n = append(*n, field+": "+why)
	}
}

// Ignored is the reason given for a field a generator leaves out entirely.
const Ignored = "not supported, ignored"

// AddIgnoredEverywhere notes the traffic policy fields that proxyless gRPC
// clusters do not carry out whatever their values: tunnel, proxyProtocol
// and retryBudget (sidecars carry out all but tunnel).
func (n *Notes) AddIgnoredEverywhere(p *networking.TrafficPolicy) {
	n.Add(p.GetTunnel() != nil, "tunnel", Ignored)
	n.Add(p.GetProxyProtocol() != nil, "proxyProtocol", Ignored)
	n.Add(p.GetRetryBudget() != nil, "retryBudget", Ignored)
}

// unsupported lists "field: why" for the fields of p the sidecar generators ignore.
func unsupported(p *networking.TrafficPolicy) Notes {
	var out Notes
	out.Add(p.GetTunnel() != nil, "tunnel", Ignored)
	lb := p.GetLoadBalancer()
	out.Add(lb.GetZoneAwareLbSetting() != nil, "loadBalancer.zoneAwareLbSetting",
		"not supported, ignored (needs Envoy zone-aware routing with a local cluster and regional priority tiers in EDS)")
	warmup := "loadBalancer.warmup"
	if lb.GetWarmup() == nil {
		warmup = "loadBalancer.warmupDurationSecs"
	}
	out.Add((lb.GetWarmup() != nil || lb.GetWarmupDurationSecs() != nil) && !slowStartApplies(lb),
		warmup, "Envoy slow start needs ROUND_ROBIN or LEAST_REQUEST, ignored")
	od := p.GetOutlierDetection()
	out.Add(od.GetConsecutiveErrors() != 0, "outlierDetection.consecutiveErrors", "deprecated and ignored; use consecutive5xxErrors")
	tls := p.GetTls()
	out.Add(tls.GetCaCrl() != "" && tls.GetCredentialName() != "", "tls.caCrl", "ignored with credentialName (the Secret carries the CRL)")
	out.Add(tls.GetCaCrl() != "" && tls.GetCredentialName() == "" && tls.GetCaCertificates() == "" &&
		tls.GetMode() != networking.ClientTLSSettings_ISTIO_MUTUAL, "tls.caCrl", "needs caCertificates, ignored")
	return out
}

// slowStartApplies reports whether lb balances with ROUND_ROBIN or
// LEAST_REQUEST, the policies Envoy's slow start works with.
func slowStartApplies(lb *networking.LoadBalancerSettings) bool {
	if lb.GetConsistentHash() != nil {
		return false
	}
	switch lb.GetSimple() {
	case networking.LoadBalancerSettings_RANDOM, networking.LoadBalancerSettings_PASSTHROUGH:
		return false
	}
	return true
}
