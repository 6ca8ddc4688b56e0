package gateway

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// rule is one Istio HTTPRoute of an HTTPRoute (one per match) with what
// orders it among the rules of every route on the same host.
type rule struct {
	http *networking.HTTPRoute
	// l4 are the destinations of a TLSRoute or TCPRoute rule (http nil):
	// a tls route matching the attachment's hostname as SNI on a
	// Passthrough listener, a tcp route on others.
	l4   []*networking.RouteDestination
	rank matchRank
	// index orders a route's own rules (rule, then match).
	index int
}

// matchRank is the spec's precedence of a match: exact path, then the
// longest path (prefix, then regular expression), then a method, then the
// most header matches, then the most query parameter matches.
type matchRank struct {
	pathKind, pathLen, method, headers, query int
}

// compare orders higher precedence first.
func (a matchRank) compare(b matchRank) int {
	for _, d := range [...]int{b.pathKind - a.pathKind, b.pathLen - a.pathLen, b.method - a.method, b.headers - a.headers, b.query - a.query} {
		if d != 0 {
			return d
		}
	}
	return 0
}

const (
	rankRegex = iota + 1
	rankPrefix
	rankExact
)

// routeRules translates r's rules, and says whether its references resolve
// (ResolvedRefs) and whether everything in it is supported (Accepted, or
// UnsupportedValue).
func (t *translator) routeRules(r *gwv1.HTTPRoute) (rules []rule, resolved, accepted metav1.Condition) {
	rc := newRouteConds(r.Generation)
	unresolved, unsupported := rc.unresolved, rc.unsupported
	index := 0
	for ri := range r.Spec.Rules {
		rl := &r.Spec.Rules[ri]
		base := &networking.HTTPRoute{}
		redirect := false
		for _, f := range rl.Filters {
			if msg := t.applyFilter(base, f, r.Namespace, unresolved); msg != "" {
				unsupported(fmt.Sprintf("rules[%d]: %s", ri, msg))
			}
			redirect = redirect || f.Type == gwv1.HTTPRouteFilterRequestRedirect
		}
		if to := rl.Timeouts; to != nil {
			d := to.Request
			if d == nil {
				d = to.BackendRequest
			}
			if d != nil {
				dur, err := time.ParseDuration(string(*d))
				switch {
				case err != nil:
					unsupported(fmt.Sprintf("rules[%d].timeouts: %v", ri, err))
				case dur > 0:
					base.Timeout = durationpb.New(dur)
				}
				// Zero disables the timeout, as a route without one
				// has (and VirtualService validation refuses 0s).
			}
		}
		if rl.Retry != nil {
			if msg := retries(base, rl.Retry, rl.Timeouts); msg != "" {
				unsupported(fmt.Sprintf("rules[%d].retry: %s", ri, msg))
			}
		}
		if !redirect {
			t.destinations(base, KindHTTPRoute, r.Namespace, ri, len(rl.BackendRefs), func(i int) (gwv1.BackendRef, []gwv1.HTTPRouteFilter) {
				return rl.BackendRefs[i].BackendRef, rl.BackendRefs[i].Filters
			}, rc)
		}
		matches := rl.Matches
		if len(matches) == 0 {
			matches = []gwv1.HTTPRouteMatch{{}}
		}
		for mi, m := range matches {
			for _, part := range t.matchParts(m) {
				h := cloneRoute(base)
				h.Name = fmt.Sprintf("%s.%s.%d.%d", r.Namespace, r.Name, ri, mi)
				h.Match = []*networking.HTTPMatchRequest{part.match}
				if part.prefixRewrite != nil && h.GetRewrite() != nil && h.GetRewrite().GetUri() != "" {
					h.Rewrite.Uri = part.prefixRewrite(h.Rewrite.Uri)
				}
				if rd := h.GetRedirect(); rd.GetPrefixRewrite() != "" {
					if msg := redirectPrefix(rd, part); msg != "" {
						unsupported(fmt.Sprintf("rules[%d].matches[%d]: %s", ri, mi, msg))
					}
				}
				rules = append(rules, rule{http: h, rank: part.rank, index: index})
				index++
			}
		}
	}
	return rules, rc.resolved, rc.accepted
}

// destinations resolves a rule's n backendRefs (ref gives the i-th, with
// its filters as HTTPRoute filters) of a route of kind kind in namespace
// ns into base's weighted destinations. A ref that does not resolve is
// recorded in rc and skipped, as is a zero weight; with none left the
// rule answers the spec's 500 (none given, none valid, all weights zero).
func (t *translator) destinations(base *networking.HTTPRoute, kind, ns string, ri, n int, ref func(i int) (gwv1.BackendRef, []gwv1.HTTPRouteFilter), rc *routeConds) {
	for bi := range n {
		b, filters := ref(bi)
		dest, reason, msg := t.backendFor(kind, b.BackendObjectReference, ns)
		if dest == nil {
			rc.unresolved(reason, fmt.Sprintf("rules[%d].backendRefs[%d]: %s", ri, bi, msg))
			continue
		}
		w := deref(b.Weight, 1)
		if w == 0 {
			continue
		}
		rd := &networking.HTTPRouteDestination{Destination: dest, Weight: w}
		for _, f := range filters {
			if msg := backendFilter(rd, f); msg != "" {
				rc.unsupported(fmt.Sprintf("rules[%d].backendRefs[%d]: %s", ri, bi, msg))
			}
		}
		base.Route = append(base.Route, rd)
	}
	if len(base.Route) == 0 {
		base.DirectResponse = &networking.HTTPDirectResponse{Status: 500}
	}
}

// retries sets the retry policy of a rule with a retry stanza, as istiod
// does: attempts (2 when unset), retried on connection failures, refused
// streams, unavailable and cancelled, and on the given status codes (no
// condition with zero attempts); the backoff as Envoy's base interval;
// timeouts.backendRequest as the per-try timeout (then not the route's
// timeout, which only timeouts.request sets).
func retries(h *networking.HTTPRoute, r *gwv1.HTTPRouteRetry, to *gwv1.HTTPRouteTimeouts) string {
	on := []string{"connect-failure", "refused-stream", "unavailable", "cancelled"}
	for _, c := range r.Codes {
		on = append(on, strconv.Itoa(int(c)))
	}
	h.Retries = &networking.HTTPRetry{Attempts: int32(deref(r.Attempts, 2)), RetryOn: strings.Join(on, ",")}
	if h.Retries.Attempts == 0 {
		h.Retries.RetryOn = ""
	}
	if r.Backoff != nil {
		d, err := time.ParseDuration(string(*r.Backoff))
		if err != nil {
			return err.Error()
		}
		h.Retries.Backoff = durationpb.New(d)
	}
	if to != nil && to.BackendRequest != nil {
		d, err := time.ParseDuration(string(*to.BackendRequest))
		if err != nil {
			return err.Error()
		}
		h.Retries.PerTryTimeout = durationpb.New(d)
		if to.Request == nil {
			h.Timeout = nil
		}
	}
	return ""
}

// redirectPrefix sets the path of a ReplacePrefixMatch redirect for one
// match part, with the trailing-slash rules of a URLRewrite's prefix: a
// whole path (an Exact match, or the exact part of a PathPrefix) is
// redirected to the replacement itself (an empty one being "/"); below a
// PathPrefix, Envoy swaps the matched "PREFIX/" for the replacement with
// one trailing slash, so /foo/bar redirects to /bar for "/" and to
// /to/bar for "/to" or "/to/". A regular expression match has no prefix
// to replace: it says so.
func redirectPrefix(rd *networking.HTTPRedirect, part matchPart) string {
	to := rd.PrefixRewrite
	switch {
	case part.whole:
		rd.PrefixRewrite = ""
		rd.Uri = to
		if part.prefixRewrite != nil {
			rd.Uri = part.prefixRewrite(to)
		}
	case part.prefixRewrite != nil:
		rd.PrefixRewrite = part.prefixRewrite(to)
	default:
		return "requestRedirect.path ReplacePrefixMatch needs a PathPrefix match"
	}
	return ""
}

// matchPart is one Istio match of a Gateway API match: a PathPrefix
// becomes two, the exact path and the path followed by "/" (Istio's
// prefix is not element-wise), each rewriting the prefix its own way.
type matchPart struct {
	match         *networking.HTTPMatchRequest
	rank          matchRank
	prefixRewrite func(string) string
	// whole: the match is of one whole path (Exact, or the exact part
	// of a PathPrefix).
	whole bool
}

func (t *translator) matchParts(m gwv1.HTTPRouteMatch) []matchPart {
	common := &networking.HTTPMatchRequest{}
	rank := matchRank{}
	for _, h := range m.Headers {
		if common.Headers == nil {
			common.Headers = map[string]*networking.StringMatch{}
		}
		common.Headers[strings.ToLower(string(h.Name))] = stringMatch(deref(h.Type, gwv1.HeaderMatchExact) == gwv1.HeaderMatchRegularExpression, h.Value)
		rank.headers++
	}
	for _, q := range m.QueryParams {
		if common.QueryParams == nil {
			common.QueryParams = map[string]*networking.StringMatch{}
		}
		common.QueryParams[string(q.Name)] = stringMatch(deref(q.Type, gwv1.QueryParamMatchExact) == gwv1.QueryParamMatchRegularExpression, q.Value)
		rank.query++
	}
	if m.Method != nil {
		common.Method = &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: string(*m.Method)}}
		rank.method = 1
	}
	typ, value := gwv1.PathMatchPathPrefix, "/"
	if m.Path != nil {
		typ, value = deref(m.Path.Type, gwv1.PathMatchPathPrefix), deref(m.Path.Value, "/")
	}
	rank.pathLen = len(value)
	with := func(sm *networking.StringMatch, kind int) matchPart {
		mr := cloneMatch(common)
		mr.Uri = sm
		r := rank
		r.pathKind = kind
		return matchPart{match: mr, rank: r}
	}
	switch typ {
	case gwv1.PathMatchExact:
		p := with(&networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: value}}, rankExact)
		p.whole = true
		return []matchPart{p}
	case gwv1.PathMatchRegularExpression:
		return []matchPart{with(&networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: value}}, rankRegex)}
	}
	trimmed := strings.TrimRight(value, "/")
	if trimmed == "" {
		p := with(&networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/"}}, rankPrefix)
		p.prefixRewrite = func(to string) string { return strings.TrimRight(to, "/") + "/" }
		return []matchPart{p}
	}
	exact := with(&networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: trimmed}}, rankPrefix)
	exact.prefixRewrite = func(to string) string {
		if to == "" {
			return "/"
		}
		return to
	}
	exact.whole = true
	prefix := with(&networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: trimmed + "/"}}, rankPrefix)
	prefix.prefixRewrite = func(to string) string { return strings.TrimRight(to, "/") + "/" }
	return []matchPart{exact, prefix}
}

func stringMatch(regex bool, v string) *networking.StringMatch {
	if regex {
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: v}}
	}
	return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: v}}
}
