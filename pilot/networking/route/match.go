package route

import (
	"fmt"
	"sort"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// matchApplies checks the parts of a match decided by the client rather
// than by the request: the listener port, source labels, source namespace
// and gateways ("mesh" only: sidecars).
func matchApplies(m *networking.HTTPMatchRequest, opts Options) bool {
	if m.GetPort() != 0 && m.GetPort() != opts.Port {
		return false
	}
	for k, v := range m.GetSourceLabels() {
		if opts.Labels[k] != v {
			return false
		}
	}
	if ns := m.GetSourceNamespace(); ns != "" && ns != opts.ProxyNamespace {
		return false
	}
	if gws := m.GetGateways(); len(gws) > 0 {
		mesh := false
		for _, g := range gws {
			mesh = mesh || g == "mesh"
		}
		if !mesh {
			return false
		}
	}
	return true
}

// buildMatch translates the request-side conditions of a match: uri
// (exact → path, prefix → prefix, regex → safe_regex), ignoreUriCase,
// headers, withoutHeaders (inverted), method, authority, scheme (as
// pseudo-headers) and queryParams.
func buildMatch(m *networking.HTTPMatchRequest) (*routev3.RouteMatch, error) {
	rm, err := PathMatch(m)
	if err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(m.GetHeaders()) {
		rm.Headers = append(rm.Headers, headerMatcher(name, m.GetHeaders()[name], false))
	}
	for _, name := range sortedKeys(m.GetWithoutHeaders()) {
		rm.Headers = append(rm.Headers, headerMatcher(name, m.GetWithoutHeaders()[name], true))
	}
	for name, sm := range map[string]*networking.StringMatch{":method": m.GetMethod(), ":authority": m.GetAuthority(), ":scheme": m.GetScheme()} {
		if sm != nil {
			rm.Headers = append(rm.Headers, headerMatcher(name, sm, false))
		}
	}
	sort.SliceStable(rm.Headers, func(i, j int) bool {
		// By name, for deterministic output (pseudo-headers sort first).
		return rm.Headers[i].Name < rm.Headers[j].Name
	})
	for _, name := range sortedKeys(m.GetQueryParams()) {
		qm := &routev3.QueryParameterMatcher{Name: name}
		sm := stringMatcher(m.GetQueryParams()[name])
		if sm == nil || (sm.GetExact() == "" && sm.GetSafeRegex() == nil && sm.GetPrefix() == "") {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		} else {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_StringMatch{StringMatch: sm}
		}
		rm.QueryParameters = append(rm.QueryParameters, qm)
	}
	return rm, nil
}

// PathMatch translates the path conditions of a match: uri (exact → path,
// prefix → prefix, regex → safe_regex; none → prefix "/") and
// ignoreUriCase. An empty uri.regex is an error.
func PathMatch(m *networking.HTTPMatchRequest) (*routev3.RouteMatch, error) {
	rm := &routev3.RouteMatch{}
	switch u := m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		rm.PathSpecifier = &routev3.RouteMatch_Path{Path: u.Exact}
	case *networking.StringMatch_Prefix:
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networking.StringMatch_Regex:
		if u.Regex == "" {
			return nil, fmt.Errorf("uri.regex: empty")
		}
		rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: u.Regex}}
	default:
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: "/"}
	}
	if m.GetIgnoreUriCase() {
		rm.CaseSensitive = wrapperspb.Bool(false)
	}
	return rm, nil
}

// headerMatcher matches a header by an Istio StringMatch; an empty match
// means "present", as in Istio.
func headerMatcher(name string, sm *networking.StringMatch, invert bool) *routev3.HeaderMatcher {
	hm := &routev3.HeaderMatcher{Name: name, InvertMatch: invert}
	if m := stringMatcher(sm); m != nil {
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: m}
	} else {
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
	}
	return hm
}

// StringMatcher converts an Istio StringMatch to Envoy's (regex →
// safe_regex); nil when it sets no match type.
func StringMatcher(sm *networking.StringMatch) *matcherv3.StringMatcher { return stringMatcher(sm) }

func stringMatcher(sm *networking.StringMatch) *matcherv3.StringMatcher {
	switch m := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: m.Exact}}
	case *networking.StringMatch_Prefix:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: m.Prefix}}
	case *networking.StringMatch_Regex:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: m.Regex}}}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
