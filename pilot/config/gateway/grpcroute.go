package gateway

import (
	"fmt"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// KindGRPCRoute is the Gateway API's gRPC route kind.
const KindGRPCRoute = "GRPCRoute"

// grpcRoute translates a GRPCRoute: its rules are HTTP rules, merged with
// the HTTPRoutes of the same listener and hostname.
func (t *translator) grpcRoute(v *validation.Validator, r *gwv1.GRPCRoute) *translatedRoute {
	rules, resolved, accepted := t.grpcRules(r)
	if accepted.Status == metav1.ConditionTrue {
		if msg := invalidRules(v, r.Namespace, r.Name, rules); msg != "" {
			accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), msg, r.Generation)
		}
	}
	return &translatedRoute{
		route:   *newRoute(KindGRPCRoute, &r.ObjectMeta, r.Spec.CommonRouteSpec, r.Spec.Hostnames),
		created: r.CreationTimestamp, rules: rules, resolved: resolved, accepted: accepted,
	}
}

// grpcRules translates r's rules into Istio HTTP routes, one per match,
// whatever r's parents are (a Gateway's listener or, for mesh routes, a
// Service), and says whether its references resolve (ResolvedRefs) and
// whether everything in it is supported (Accepted, or UnsupportedValue).
// As istiod, a method match becomes a match on the path /SERVICE/METHOD:
// Exact with both gives an exact path, a service alone the prefix
// /SERVICE/, a method alone the regular expression /[^/]+/METHOD;
// RegularExpression gives the regular expression /SERVICE/METHOD (.+ for
// a missing method).
func (t *translator) grpcRules(r *gwv1.GRPCRoute) (rules []rule, resolved, accepted metav1.Condition) {
	rc := newRouteConds(r.Generation)
	unresolved, unsupported := rc.unresolved, rc.unsupported
	index := 0
	for ri := range r.Spec.Rules {
		rl := &r.Spec.Rules[ri]
		base := &networking.HTTPRoute{}
		for _, f := range rl.Filters {
			if msg := t.grpcFilter(base, f, r.Namespace, unresolved); msg != "" {
				unsupported(fmt.Sprintf("rules[%d]: %s", ri, msg))
			}
		}
		t.destinations(base, KindGRPCRoute, r.Namespace, ri, len(rl.BackendRefs), func(i int) (gwv1.BackendRef, []gwv1.HTTPRouteFilter) {
			return rl.BackendRefs[i].BackendRef, httpFilters(rl.BackendRefs[i].Filters)
		}, rc)
		matches := rl.Matches
		if len(matches) == 0 {
			matches = []gwv1.GRPCRouteMatch{{}}
		}
		for mi, m := range matches {
			mr, rank, msg := grpcMatch(m)
			if msg != "" {
				unsupported(fmt.Sprintf("rules[%d].matches[%d]: %s", ri, mi, msg))
				continue
			}
			h := cloneRoute(base)
			h.Name = fmt.Sprintf("%s.%s.%d.%d", r.Namespace, r.Name, ri, mi)
			h.Match = []*networking.HTTPMatchRequest{mr}
			rules = append(rules, rule{http: h, rank: rank, index: index})
			index++
		}
	}
	return rules, rc.resolved, rc.accepted
}

// httpFilters gives GRPCRoute backend filters as the HTTPRoute filters
// of the same type and fields (the header modifiers; others carry no
// HTTPRoute field and are refused as unsupported by backendFilter).
func httpFilters(fs []gwv1.GRPCRouteFilter) []gwv1.HTTPRouteFilter {
	if len(fs) == 0 {
		return nil
	}
	out := make([]gwv1.HTTPRouteFilter, len(fs))
	for i, f := range fs {
		out[i] = gwv1.HTTPRouteFilter{
			Type:                   gwv1.HTTPRouteFilterType(f.Type),
			RequestHeaderModifier:  f.RequestHeaderModifier,
			ResponseHeaderModifier: f.ResponseHeaderModifier,
		}
	}
	return out
}

// grpcMatch is the Istio match of a GRPCRoute match and its precedence
// (an exact method as an exact path, a service alone as a prefix, a
// regular expression last; then the longest path match; then the most
// headers).
func grpcMatch(m gwv1.GRPCRouteMatch) (*networking.HTTPMatchRequest, matchRank, string) {
	mr := &networking.HTTPMatchRequest{}
	rank := matchRank{}
	for _, h := range m.Headers {
		if mr.Headers == nil {
			mr.Headers = map[string]*networking.StringMatch{}
		}
		mr.Headers[strings.ToLower(string(h.Name))] = stringMatch(deref(h.Type, gwv1.GRPCHeaderMatchExact) == gwv1.GRPCHeaderMatchRegularExpression, h.Value)
		rank.headers++
	}
	mm := m.Method
	if mm == nil {
		return mr, rank, ""
	}
	if mm.Service == nil && mm.Method == nil {
		return nil, rank, "method match needs a service or a method"
	}
	svc, method := deref(mm.Service, ""), deref(mm.Method, "")
	switch deref(mm.Type, gwv1.GRPCMethodMatchExact) {
	case gwv1.GRPCMethodMatchExact:
		switch {
		case mm.Method == nil:
			mr.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/" + svc + "/"}}
			rank.pathKind = rankPrefix
		case mm.Service == nil:
			mr.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/[^/]+/" + method}}
			rank.pathKind = rankRegex
		default:
			mr.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: "/" + svc + "/" + method}}
			rank.pathKind = rankExact
		}
	case gwv1.GRPCMethodMatchRegularExpression:
		rank.pathKind = rankRegex
		switch {
		case mm.Method == nil:
			mr.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/" + svc + "/.+"}}
		case mm.Service == nil:
			mr.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/[^/]+/" + method}}
		default:
			mr.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/" + svc + "/" + method}}
		}
	default:
		return nil, rank, fmt.Sprintf("method match type %q", *mm.Type)
	}
	// As istiod orders them: by the length of the path match.
	rank.pathLen = len(mr.Uri.GetExact() + mr.Uri.GetPrefix() + mr.Uri.GetRegex())
	return mr, rank, ""
}

// grpcFilter sets on h what a GRPCRoute rule's filter does: header
// modifiers and request mirrors, as for HTTPRoute; it returns why f is not
// supported, "" if it is.
func (t *translator) grpcFilter(h *networking.HTTPRoute, f gwv1.GRPCRouteFilter, ns string, unresolved func(gwv1.RouteConditionReason, string)) string {
	switch f.Type {
	case gwv1.GRPCRouteFilterRequestHeaderModifier:
		return t.applyFilter(h, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: f.RequestHeaderModifier}, ns, unresolved)
	case gwv1.GRPCRouteFilterResponseHeaderModifier:
		return t.applyFilter(h, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: f.ResponseHeaderModifier}, ns, unresolved)
	case gwv1.GRPCRouteFilterRequestMirror:
		m := f.RequestMirror
		if m == nil {
			return "requestMirror missing"
		}
		dest, reason, msg := t.backendFor(KindGRPCRoute, m.BackendRef, ns)
		if dest == nil {
			unresolved(reason, "requestMirror: "+msg)
			return ""
		}
		mp := &networking.HTTPMirrorPolicy{Destination: dest}
		if pct, msg := mirrorPercent(m); msg != "" {
			return msg
		} else if pct != nil {
			mp.Percentage = pct
		}
		h.Mirrors = append(h.Mirrors, mp)
		return ""
	default:
		return fmt.Sprintf("filter type %s is not supported", f.Type)
	}
}

// mirrorPercent is the share of requests a mirror filter copies: nil for
// all of them.
func mirrorPercent(m *gwv1.HTTPRequestMirrorFilter) (*networking.Percent, string) {
	switch {
	case m.Percent != nil:
		return &networking.Percent{Value: float64(*m.Percent)}, ""
	case m.Fraction != nil:
		den := deref(m.Fraction.Denominator, 100)
		if den <= 0 {
			return nil, "requestMirror.fraction.denominator must be positive"
		}
		return &networking.Percent{Value: 100 * float64(m.Fraction.Numerator) / float64(den)}, ""
	}
	return nil, ""
}
