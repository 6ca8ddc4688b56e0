package route

import (
	"fmt"
	"sort"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// BuildHTTPRoutes translates the http section of a VirtualService of
// namespace ns into Envoy routes for a route configuration of port. Hosts
// are resolved against ns and domain ("cluster.local"). Matches that carry
// sourceLabels are dropped: use BuildHTTPRoutesForProxy to honour them.
func BuildHTTPRoutes(vs *networking.VirtualService, ns string, port uint32, domain string) ([]*routev3.Route, error) {
	return BuildHTTPRoutesForProxy(vs, ns, port, domain, nil)
}

// BuildHTTPRoutesForProxy is BuildHTTPRoutes for a client workload with the
// given labels: a match with sourceLabels applies only when they all match.
//
// Supported: match uri/headers/withoutHeaders/method/authority/scheme/
// queryParams/port/ignoreUriCase/sourceLabels/gateways ("mesh"), route
// (single or weighted destinations), redirect, directResponse, rewrite
// (uri prefix, authority) and timeout. Retries, fault injection,
// mirroring, CORS and header manipulation are not translated yet.
func BuildHTTPRoutesForProxy(vs *networking.VirtualService, ns string, port uint32, domain string, labels map[string]string) ([]*routev3.Route, error) {
	var out []*routev3.Route
	for i, h := range vs.GetHttp() {
		action, err := buildAction(h, ns, port, domain)
		if err != nil {
			return nil, fmt.Errorf("http[%d] (%q): %w", i, h.GetName(), err)
		}
		if len(h.GetMatch()) == 0 {
			r := &routev3.Route{Name: h.GetName(), Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}}
			action(r)
			out = append(out, r)
			continue
		}
		for j, m := range h.GetMatch() {
			if !matchApplies(m, port, labels) {
				continue
			}
			rm, err := buildMatch(m)
			if err != nil {
				return nil, fmt.Errorf("http[%d] (%q) match[%d]: %w", i, h.GetName(), j, err)
			}
			name := h.GetName()
			if m.GetName() != "" {
				if name != "" {
					name += "."
				}
				name += m.GetName()
			}
			r := &routev3.Route{Name: name, Match: rm}
			action(r)
			out = append(out, r)
		}
	}
	return out, nil
}

// matchApplies checks the parts of a match decided by the client rather
// than by the request: the listener port, source labels and gateways.
func matchApplies(m *networking.HTTPMatchRequest, port uint32, labels map[string]string) bool {
	if m.GetPort() != 0 && m.GetPort() != port {
		return false
	}
	for k, v := range m.GetSourceLabels() {
		if labels[k] != v {
			return false
		}
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

func buildMatch(m *networking.HTTPMatchRequest) (*routev3.RouteMatch, error) {
	rm := &routev3.RouteMatch{}
	switch u := m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		rm.PathSpecifier = &routev3.RouteMatch_Path{Path: u.Exact}
	case *networking.StringMatch_Prefix:
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networking.StringMatch_Regex:
		rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: u.Regex}}
	default:
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: "/"}
	}
	if m.GetIgnoreUriCase() {
		rm.CaseSensitive = wrapperspb.Bool(false)
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

// stringMatcher converts an Istio StringMatch; nil when it sets no match type.
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

// buildAction returns a function that sets the action of a route for h.
func buildAction(h *networking.HTTPRoute, ns string, port uint32, domain string) (func(*routev3.Route), error) {
	if rd := h.GetRedirect(); rd != nil {
		ra := &routev3.RedirectAction{HostRedirect: rd.GetAuthority()}
		if rd.GetUri() != "" {
			ra.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: rd.GetUri()}
		}
		if rd.GetScheme() != "" {
			ra.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: rd.GetScheme()}
		}
		switch rd.GetRedirectCode() {
		case 0, 301:
			ra.ResponseCode = routev3.RedirectAction_MOVED_PERMANENTLY
		case 302:
			ra.ResponseCode = routev3.RedirectAction_FOUND
		case 303:
			ra.ResponseCode = routev3.RedirectAction_SEE_OTHER
		case 307:
			ra.ResponseCode = routev3.RedirectAction_TEMPORARY_REDIRECT
		case 308:
			ra.ResponseCode = routev3.RedirectAction_PERMANENT_REDIRECT
		default:
			return nil, fmt.Errorf("redirect.redirectCode %d: not a redirect status", rd.GetRedirectCode())
		}
		return func(r *routev3.Route) { r.Action = &routev3.Route_Redirect{Redirect: ra} }, nil
	}
	if dr := h.GetDirectResponse(); dr != nil {
		da := &routev3.DirectResponseAction{Status: dr.GetStatus()}
		if b := dr.GetBody(); b != nil {
			switch {
			case b.GetString_() != "":
				da.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: b.GetString_()}}
			case b.GetBytes() != nil:
				da.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b.GetBytes()}}
			}
		}
		return func(r *routev3.Route) { r.Action = &routev3.Route_DirectResponse{DirectResponse: da} }, nil
	}
	ra, err := routeAction(h, ns, port, domain)
	if err != nil {
		return nil, err
	}
	return func(r *routev3.Route) { r.Action = &routev3.Route_Route{Route: ra} }, nil
}

func routeAction(h *networking.HTTPRoute, ns string, port uint32, domain string) (*routev3.RouteAction, error) {
	if len(h.GetRoute()) == 0 {
		return nil, fmt.Errorf("route: empty, and no redirect or directResponse")
	}
	timeout := durationpb.New(0)
	if h.GetTimeout() != nil {
		timeout = durationpb.New(h.GetTimeout().AsDuration())
	}
	ra := &routev3.RouteAction{Timeout: timeout}
	var weighted []*routev3.WeightedCluster_ClusterWeight
	for i, d := range h.GetRoute() {
		if d.GetDestination().GetHost() == "" {
			return nil, fmt.Errorf("route[%d].destination.host: empty", i)
		}
		if d.GetWeight() == 0 && len(h.GetRoute()) > 1 {
			continue
		}
		weight := uint32(d.GetWeight())
		if weight == 0 {
			weight = 100
		}
		weighted = append(weighted, &routev3.WeightedCluster_ClusterWeight{
			Name:   destinationCluster(d.GetDestination(), ns, port, domain),
			Weight: wrapperspb.UInt32(weight),
		})
	}
	switch len(weighted) {
	case 0:
		return nil, fmt.Errorf("route: every destination has weight 0")
	case 1:
		ra.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: weighted[0].Name}
	default:
		ra.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: weighted}}
	}
	if rw := h.GetRewrite(); rw != nil {
		if rw.GetUri() != "" {
			ra.PrefixRewrite = rw.GetUri()
		}
		if rw.GetAuthority() != "" {
			ra.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: rw.GetAuthority()}
		}
	}
	return ra, nil
}

// destinationCluster names the outbound cluster of a destination; the port
// defaults to the route configuration's.
func destinationCluster(d *networking.Destination, ns string, port uint32, domain string) string {
	if p := d.GetPort().GetNumber(); p != 0 {
		port = p
	}
	return cluster.BuildName(cluster.Outbound, d.GetSubset(), model.ResolveShortname(d.GetHost(), ns, domain), port)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
