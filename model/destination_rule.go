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

// mergeDestinationRule merges rule c into into, a rule of the same
// namespace and host (neither with a workloadSelector), as Istio does:
// c's subsets whose names into lacks are appended; c's top-level
// trafficPolicy is taken only when into has none; exportTo stays into's
// (Istio takes a later rule's only when the first has no export set, and
// a rule without exportTo has the default one). into is copied first unless it is already a merged
// rule of this build; store objects are never changed. The result has
// into's metadata; DestinationRuleSources lists the rules behind it.
func (pc *PushContext) mergeDestinationRule(into, c *Config) *Config {
	if pc.drSources[into] == nil {
		base := into.Spec.(*networking.DestinationRule)
		merged := &Config{Meta: into.Meta, Spec: &networking.DestinationRule{
			Host: base.GetHost(), TrafficPolicy: base.GetTrafficPolicy(), Subsets: slices.Clone(base.GetSubsets()),
			ExportTo: base.GetExportTo(), WorkloadSelector: base.GetWorkloadSelector(),
		}}
		if pc.drSources == nil {
			pc.drSources = map[*Config][]*Config{}
		}
		pc.drSources[merged] = []*Config{into}
		into = merged
	}
	spec, rule := into.Spec.(*networking.DestinationRule), c.Spec.(*networking.DestinationRule)
	for _, s := range rule.GetSubsets() {
		if Subset(into, s.GetName()) == nil {
			spec.Subsets = append(spec.Subsets, s)
		}
	}
	if spec.TrafficPolicy == nil {
		spec.TrafficPolicy = rule.GetTrafficPolicy()
	}
	pc.drSources[into] = append(pc.drSources[into], c)
	return into
}

// DestinationRuleSources returns the rules dr, as returned by
// DestinationRule or DestinationRuleFor, was made from: several when
// rules of one namespace for one host were merged, in precedence order,
// else dr alone. Caches that depend on dr depend on each of them.
func (pc *PushContext) DestinationRuleSources(dr *Config) []*Config {
	if dr == nil {
		return nil
	}
	if src := pc.drSources[dr]; src != nil {
		return src
	}
	return []*Config{dr}
}
