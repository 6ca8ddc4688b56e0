package route

import (
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// HashPolicyLookup returns the consistent-hash policy of the traffic policy
// in force for host (a resolved FQDN), subset and port, or nil when that
// policy does not hash.
type HashPolicyLookup func(host, subset string, port uint32) []*routev3.RouteAction_HashPolicy

// PushHashPolicies looks hash policies up in the DestinationRules of push
// that apply to proxy (cluster.HashPolicy on the rule
// model.PushContext.DestinationRuleFor picks). Hosts with no service give nil.
func PushHashPolicies(push *model.PushContext, proxy *model.Proxy) HashPolicyLookup {
	return func(host, subset string, port uint32) []*routev3.RouteAction_HashPolicy {
		svc := push.ServiceByHost(host)
		if svc == nil {
			return nil
		}
		return cluster.HashPolicy(push.DestinationRuleFor(proxy, svc), subset, port)
	}
}

// hashPolicy is lookup's answer, nil for a nil lookup.
func (lookup HashPolicyLookup) hashPolicy(host, subset string, port uint32) []*routev3.RouteAction_HashPolicy {
	if lookup == nil {
		return nil
	}
	return lookup(host, subset, port)
}
