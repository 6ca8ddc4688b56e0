package model

import (
	"maps"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// DestinationRuleFor returns the DestinationRule proxy sees for svc. As in
// Istio (1.17+), a rule with a workloadSelector applies only to the
// workloads of its own namespace whose labels it selects, and there it
// takes precedence over every rule without one; among selecting rules for
// the service the first in store order wins, an exact host before a
// wildcard. Otherwise the answer is DestinationRule(proxy's namespace, svc).
func (pc *PushContext) DestinationRuleFor(proxy *Proxy, svc *Service) *Config {
	ns := proxy.ConfigNamespace()
	if sel := pc.drSelected[ns]; len(sel) > 0 {
		var wildcard *Config
		for _, c := range sel {
			dr := c.Spec.(*networking.DestinationRule)
			if !labelsMatch(dr.GetWorkloadSelector().GetMatchLabels(), proxy.Labels()) {
				continue
			}
			h := ResolveShortname(dr.GetHost(), c.Namespace, pc.DomainSuffix)
			if h == svc.Hostname {
				return c
			}
			if wildcard == nil && strings.HasPrefix(h, "*") && HostMatches(h, svc.Hostname) {
				wildcard = c
			}
		}
		if wildcard != nil {
			return wildcard
		}
	}
	return pc.DestinationRule(ns, svc)
}

// DestinationRuleScope is what, besides its namespace, decides which
// DestinationRules a proxy sees: "" when no rule of its namespace has a
// workloadSelector, else the proxy's labels that some such rule names, in
// a stable form. Caches of resources that depend on DestinationRules of
// several services (route configurations) add it to their key.
func (pc *PushContext) DestinationRuleScope(proxy *Proxy) string {
	sel := pc.drSelected[proxy.ConfigNamespace()]
	if len(sel) == 0 {
		return ""
	}
	named := map[string]bool{}
	for _, c := range sel {
		for k := range c.Spec.(*networking.DestinationRule).GetWorkloadSelector().GetMatchLabels() {
			named[k] = true
		}
	}
	var b strings.Builder
	b.WriteString("\x00dr")
	labels := proxy.Labels()
	for _, k := range slices.Sorted(maps.Keys(named)) {
		if v, ok := labels[k]; ok {
			b.WriteString("\x00" + k + "=" + v)
		}
	}
	return b.String()
}
