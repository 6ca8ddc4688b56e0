package gateway

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// tcpRoute translates a TCPRoute: each rule's backends become a tcp route
// of the TCP (or TLS Terminate) listeners it attaches to. TCP listeners
// have no hostname, so every TCPRoute attached to one shares its
// VirtualService; the oldest route's first rule carries the traffic (a
// tcp route without match takes every connection).
func (t *translator) tcpRoute(r *gwv1.TCPRoute) *translatedRoute {
	backends := make([][]gwv1.BackendRef, len(r.Spec.Rules))
	for i, rl := range r.Spec.Rules {
		backends[i] = rl.BackendRefs
	}
	rules, resolved := t.l4Rules(KindTCPRoute, r.Namespace, r.Generation, backends)
	return &translatedRoute{
		route:   *newRoute(KindTCPRoute, &r.ObjectMeta, r.Spec.CommonRouteSpec, nil),
		created: r.CreationTimestamp, rules: rules, resolved: resolved,
		accepted: cond(string(gwv1.RouteConditionAccepted), true, string(gwv1.RouteReasonAccepted), "", r.Generation),
	}
}

// udpRoute describes a UDPRoute: no UDP listener is served (a UDP
// listener is UnsupportedProtocol), so each parent of ours reports it not
// accepted, with reason UnsupportedValue. (istiod does not watch UDPRoutes
// and writes no status for them.)
func (t *translator) udpRoute(r *gwv1.UDPRoute) *translatedRoute {
	return &translatedRoute{
		route:    *newRoute(KindUDPRoute, &r.ObjectMeta, r.Spec.CommonRouteSpec, nil),
		created:  r.CreationTimestamp,
		resolved: cond(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "", r.Generation),
		accepted: cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue),
			"UDPRoute is not supported: no UDP listener is served", r.Generation),
	}
}

// l4Rules resolves the backends of each rule of a TLSRoute or TCPRoute of
// kind: a rule's valid backends of non-zero weight, with their weights,
// make one l4 rule. A rule with none is left out, so its connections are
// refused (no filter chain or tcp route takes them), as the spec asks.
func (t *translator) l4Rules(kind, ns string, gen int64, rules [][]gwv1.BackendRef) ([]rule, metav1.Condition) {
	resolved := cond(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "", gen)
	var out []rule
	for ri, backends := range rules {
		var dests []*networking.RouteDestination
		for bi, b := range backends {
			dest, reason, msg := t.backendFor(kind, b.BackendObjectReference, ns)
			if dest == nil {
				if resolved.Status == metav1.ConditionTrue {
					resolved = cond(string(gwv1.RouteConditionResolvedRefs), false, string(reason), fmt.Sprintf("rules[%d].backendRefs[%d]: %s", ri, bi, msg), gen)
				}
				continue
			}
			w := deref(b.Weight, 1)
			if w == 0 {
				continue
			}
			dests = append(dests, &networking.RouteDestination{Destination: dest, Weight: w})
		}
		if len(dests) == 0 {
			continue
		}
		out = append(out, rule{l4: dests, index: ri})
	}
	return out, resolved
}

func cloneDestinations(ds []*networking.RouteDestination) []*networking.RouteDestination {
	out := make([]*networking.RouteDestination, len(ds))
	for i, d := range ds {
		out[i] = proto.Clone(d).(*networking.RouteDestination)
	}
	return out
}
