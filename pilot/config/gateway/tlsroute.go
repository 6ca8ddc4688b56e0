package gateway

import (
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// tlsRoute translates a TLSRoute: on a Passthrough listener each rule's
// backends become a tls route matching, as SNI, each hostname the route
// and the listener share (one VirtualService per hostname, as istiod);
// on a Terminate listener, a tcp route of the VirtualService of that
// hostname, after the gateway ends TLS.
func (t *translator) tlsRoute(r *gwv1.TLSRoute) *translatedRoute {
	backends := make([][]gwv1.BackendRef, len(r.Spec.Rules))
	for i, rl := range r.Spec.Rules {
		backends[i] = rl.BackendRefs
	}
	rules, resolved := t.l4Rules(KindTLSRoute, r.Namespace, r.Generation, backends)
	return &translatedRoute{
		route:   *newRoute(KindTLSRoute, &r.ObjectMeta, r.Spec.CommonRouteSpec, r.Spec.Hostnames),
		created: r.CreationTimestamp, rules: rules, resolved: resolved,
		accepted: cond(string(gwv1.RouteConditionAccepted), true, string(gwv1.RouteReasonAccepted), "", r.Generation),
	}
}
