package cluster

import (
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// EffectivePolicy returns the traffic policy of the cluster for (subset,
// port) of rule, merged the way Istio does: the rule's policy with its
// matching portLevelSettings entry applied, then the subset's policy field
// by field over it, then the subset's own matching portLevelSettings entry.
// A portLevelSettings entry does not inherit: it replaces loadBalancer,
// connectionPool, outlierDetection and tls as a whole, unset ones included.
// The result may be nil and must not be changed.
func EffectivePolicy(rule *networking.DestinationRule, subset string, port uint32) *networking.TrafficPolicy {
	base := withPort(rule.GetTrafficPolicy(), port)
	if subset == "" {
		return base
	}
	var sp *networking.TrafficPolicy
	for _, s := range rule.GetSubsets() {
		if s.GetName() == subset {
			sp = s.GetTrafficPolicy()
			break
		}
	}
	if sp == nil {
		return base
	}
	merged := &networking.TrafficPolicy{}
	if base != nil {
		*merged = networking.TrafficPolicy{
			LoadBalancer: base.LoadBalancer, ConnectionPool: base.ConnectionPool,
			OutlierDetection: base.OutlierDetection, Tls: base.Tls,
			Tunnel: base.Tunnel, ProxyProtocol: base.ProxyProtocol, RetryBudget: base.RetryBudget,
		}
	}
	if sp.LoadBalancer != nil {
		merged.LoadBalancer = sp.LoadBalancer
	}
	if sp.ConnectionPool != nil {
		merged.ConnectionPool = sp.ConnectionPool
	}
	if sp.OutlierDetection != nil {
		merged.OutlierDetection = sp.OutlierDetection
	}
	if sp.Tls != nil {
		merged.Tls = sp.Tls
	}
	if sp.Tunnel != nil {
		merged.Tunnel = sp.Tunnel
	}
	if sp.ProxyProtocol != nil {
		merged.ProxyProtocol = sp.ProxyProtocol
	}
	if sp.RetryBudget != nil {
		merged.RetryBudget = sp.RetryBudget
	}
	if pls := portSettings(sp, port); pls != nil {
		overridePort(merged, pls)
	}
	return merged
}

// EffectivePolicyFor is EffectivePolicy for a DestinationRule config (nil for none).
func EffectivePolicyFor(dr *model.Config, subset string, port uint32) *networking.TrafficPolicy {
	if dr == nil {
		return nil
	}
	rule, _ := dr.Spec.(*networking.DestinationRule)
	return EffectivePolicy(rule, subset, port)
}

// withPort returns p with its portLevelSettings entry for port applied
// (p itself when there is none).
func withPort(p *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy {
	pls := portSettings(p, port)
	if pls == nil {
		return p
	}
	out := &networking.TrafficPolicy{Tunnel: p.Tunnel, ProxyProtocol: p.ProxyProtocol, RetryBudget: p.RetryBudget}
	overridePort(out, pls)
	return out
}

func overridePort(p *networking.TrafficPolicy, pls *networking.TrafficPolicy_PortTrafficPolicy) {
	p.LoadBalancer = pls.LoadBalancer
	p.ConnectionPool = pls.ConnectionPool
	p.OutlierDetection = pls.OutlierDetection
	p.Tls = pls.Tls
}

func portSettings(p *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy_PortTrafficPolicy {
	for _, pls := range p.GetPortLevelSettings() {
		if pls.GetPort() != nil && pls.GetPort().GetNumber() == port {
			return pls
		}
	}
	return nil
}
