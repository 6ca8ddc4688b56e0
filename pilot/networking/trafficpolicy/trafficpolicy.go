// Package trafficpolicy lists the traffic policies of a DestinationRule
// (the rule's, its subsets' and their port-level settings) and words the
// warnings for the fields a generator does not carry out.
package trafficpolicy

import (
	"fmt"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// At is one traffic policy written in a DestinationRule and where:
// Path is "trafficPolicy", "trafficPolicy.portLevelSettings[port 9080]",
// "subsets[v2].trafficPolicy" and so on. A port-level entry carries only
// loadBalancer, connectionPool, outlierDetection and tls.
type At struct {
	Path   string
	Policy *networking.TrafficPolicy
}

// All lists every traffic policy of rule: the rule's, its port-level
// entries, then each subset's and their port-level entries.
func All(rule *networking.DestinationRule) []At {
	var out []At
	add := func(path string, p *networking.TrafficPolicy) {
		if p == nil {
			return
		}
		out = append(out, At{Path: path, Policy: p})
		for _, pls := range p.GetPortLevelSettings() {
			out = append(out, At{
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

// Warnings runs check on every traffic policy of the DestinationRule
// dr (see All) and prefixes each "field: why" it returns with the
// rule and the policy's path: "DestinationRule ns/name: path.field: why".
// nil dr has none.
func Warnings(dr *model.Config, check func(*networking.TrafficPolicy) Notes) []string {
	if dr == nil {
		return nil
	}
	rule, _ := dr.Spec.(*networking.DestinationRule)
	var out []string
	for _, pa := range All(rule) {
		for _, w := range check(pa.Policy) {
			out = append(out, fmt.Sprintf("DestinationRule %s/%s: %s.%s", dr.Namespace, dr.Name, pa.Path, w))
		}
	}
	return out
}

// Notes collects the "field: why" notes of a Warnings check.
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
