package grpcgen

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// grpcRetryOn is what a VirtualService retry means for gRPC when retryOn is
// unset or names no status gRPC retries on.
const grpcRetryOn = "unavailable"

// grpcRetryable are the retry_on conditions grpc-go understands: gRPC
// status names; it ignores every other.
var grpcRetryable = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

// faultFilterName names the fault filter in the API listener and in the
// routes' typed_per_filter_config (they must agree for grpc-go).
const faultFilterName = route.FaultFilterName

// nonGRPCRetryOn lists the retryOn conditions grpc-go ignores.
func nonGRPCRetryOn(s string) string {
	var out []string
	for _, tok := range strings.Split(s, ",") {
		if tok = strings.TrimSpace(tok); tok != "" && !containsString(grpcRetryable, tok) {
			out = append(out, tok)
		}
	}
	return strings.Join(out, ",")
}

// grpcRetryPolicy translates retries for grpc-go: attempts → num_retries,
// retryOn keeps the gRPC status names (default "unavailable"), backoff →
// base interval. No retries (nil) when unset or attempts is 0: grpc-go has
// no Istio default policy.
func grpcRetryPolicy(r *networking.HTTPRetry) *routev3.RetryPolicy {
	if r.GetAttempts() <= 0 {
		return nil
	}
	var on []string
	for _, tok := range strings.Split(r.GetRetryOn(), ",") {
		if tok = strings.TrimSpace(tok); containsString(grpcRetryable, tok) && !containsString(on, tok) {
			on = append(on, tok)
		}
	}
	if len(on) == 0 {
		on = []string{grpcRetryOn}
	}
	rp := &routev3.RetryPolicy{RetryOn: strings.Join(on, ","), NumRetries: wrapperspb.UInt32(uint32(r.GetAttempts()))}
	if b := r.GetBackoff(); b != nil && b.AsDuration() > 0 {
		rp.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(b.AsDuration())}
	}
	return rp
}

// routeContext is what translating one VirtualService for one target needs.
type routeContext struct {
	proxy *model.Proxy
	push  *model.PushContext
	// vsNamespace resolves short destination hosts.
	vsNamespace string
	target      target
}

// buildVSRoutes translates the HTTP routes of a VirtualService (delegates
// expanded, see route.ExpandDelegates) into routes grpc-go accepts. Matches
// that do not apply to this proxy or port are dropped; routes whose actions
// gRPC cannot perform (redirect, direct response) or that match on query
// parameters are skipped (UnsupportedFields names them).
func buildVSRoutes(rc routeContext, vs *networking.VirtualService) ([]*routev3.Route, []string, error) {
	var out []*routev3.Route
	scoped, warns := route.ExpandDelegates(vs, rc.vsNamespace, route.PushDelegates(rc.push))
	for _, s := range scoped {
		hr := s.Route
		if hr.GetRedirect() != nil || hr.GetDirectResponse() != nil || len(hr.GetRoute()) == 0 {
			continue
		}
		src := rc
		src.vsNamespace = s.Namespace
		action, err := buildRouteAction(src, hr)
		if err != nil {
			return nil, nil, fmt.Errorf("%s (%q): %w", s.Path, hr.GetName(), err)
		}
		if action == nil {
			continue
		}
		filters, err := perFilterConfig(hr)
		if err != nil {
			return nil, nil, fmt.Errorf("%s (%q): %w", s.Path, hr.GetName(), err)
		}
		if len(hr.GetMatch()) == 0 {
			out = append(out, &routev3.Route{
				Name:                 hr.GetName(),
				Match:                &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action:               &routev3.Route_Route{Route: action},
				TypedPerFilterConfig: filters,
			})
			continue
		}
		for j, m := range hr.GetMatch() {
			if !matchApplies(rc, m) {
				continue
			}
			match, err := buildRouteMatch(m, headerStyleFor(rc.proxy))
			if err != nil {
				return nil, nil, fmt.Errorf("%s (%q).match[%d]: %w", s.Path, hr.GetName(), j, err)
			}
			out = append(out, &routev3.Route{
				Name:                 routeName(hr.GetName(), m.GetName()),
				Match:                match,
				Action:               &routev3.Route_Route{Route: action},
				TypedPerFilterConfig: filters,
			})
		}
	}
	return out, warns, nil
}

// perFilterConfig carries a route's fault injection to grpc-go's fault
// filter (the API listener lists it before the router).
func perFilterConfig(hr *networking.HTTPRoute) (map[string]*anypb.Any, error) {
	if hr.GetFault() == nil {
		return nil, nil
	}
	f, err := route.FaultConfig(hr.GetFault())
	if err != nil {
		return nil, fmt.Errorf("fault: %w", err)
	}
	if f == nil {
		return nil, nil
	}
	a, err := toAny(f)
	if err != nil {
		return nil, fmt.Errorf("fault: %w", err)
	}
	return map[string]*anypb.Any{faultFilterName: a}, nil
}

func routeName(route, match string) string {
	if route != "" && match != "" {
		return route + "." + match
	}
	return route + match
}

// matchApplies applies the match conditions that depend on the client, not
// on the request: port, gateways, source labels and source namespace.
func matchApplies(rc routeContext, m *networking.HTTPMatchRequest) bool {
	if m.GetPort() != 0 && m.GetPort() != rc.target.port.Port {
		return false
	}
	if gws := m.GetGateways(); len(gws) > 0 && !containsString(gws, "mesh") {
		return false
	}
	if ns := m.GetSourceNamespace(); ns != "" && ns != rc.proxy.ConfigNamespace() {
		return false
	}
	labels := rc.proxy.Labels()
	for k, v := range m.GetSourceLabels() {
		if labels[k] != v {
			return false
		}
	}
	// grpc-go ignores routes with query parameter matchers; do not emit them.
	return len(m.GetQueryParams()) == 0
}

// buildRouteMatch translates uri, method, authority, headers and
// withoutHeaders, with header matchers in style. A match without uri
// matches every path.
func buildRouteMatch(m *networking.HTTPMatchRequest, style headerMatchStyle) (*routev3.RouteMatch, error) {
	out, err := route.PathMatch(m)
	if err != nil {
		return nil, err
	}
	add := func(name string, sm *networking.StringMatch, invert bool) error {
		h, err := buildHeaderMatcher(name, sm, invert, style)
		if err != nil {
			return err
		}
		out.Headers = append(out.Headers, h)
		return nil
	}
	if m.GetMethod() != nil {
		if err := add(":method", m.GetMethod(), false); err != nil {
			return nil, fmt.Errorf("method: %w", err)
		}
	}
	if m.GetAuthority() != nil {
		if err := add(":authority", m.GetAuthority(), false); err != nil {
			return nil, fmt.Errorf("authority: %w", err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.GetHeaders())) {
		if err := add(name, m.GetHeaders()[name], false); err != nil {
			return nil, fmt.Errorf("headers[%q]: %w", name, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.GetWithoutHeaders())) {
		if err := add(name, m.GetWithoutHeaders()[name], true); err != nil {
			return nil, fmt.Errorf("withoutHeaders[%q]: %w", name, err)
		}
	}
	return out, nil
}

// buildHeaderMatcher translates a StringMatch on a header; an empty match
// means "present". style picks the fields a value match is written in.
func buildHeaderMatcher(name string, sm *networking.StringMatch, invert bool, style headerMatchStyle) (*routev3.HeaderMatcher, error) {
	h := &routev3.HeaderMatcher{Name: name, InvertMatch: invert}
	if v, ok := sm.GetMatchType().(*networking.StringMatch_Regex); ok && v.Regex == "" {
		return nil, fmt.Errorf("regex: empty")
	}
	// grpc-go rejects empty string matchers; Istio treats them (and a
	// match without type) as "present".
	str := route.StringMatcher(sm)
	if str.GetExact() == "" && str.GetPrefix() == "" && str.GetSafeRegex() == nil {
		h.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
		return h, nil
	}
	setHeaderMatch(h, str, style)
	return h, nil
}

// buildRouteAction picks the cluster or weighted clusters, timeout and
// retries. It returns nil when no destination carries weight.
func buildRouteAction(rc routeContext, hr *networking.HTTPRoute) (*routev3.RouteAction, error) {
	action := &routev3.RouteAction{}
	dests := hr.GetRoute()
	if len(dests) == 1 {
		action.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: destinationCluster(rc, dests[0].GetDestination())}
		action.HashPolicy = destinationHashPolicy(rc, dests[0].GetDestination())
	} else {
		var wcs []*routev3.WeightedCluster_ClusterWeight
		for i, d := range dests {
			if d.GetWeight() < 0 {
				return nil, fmt.Errorf("route[%d].weight: %d is negative", i, d.GetWeight())
			}
			if d.GetWeight() == 0 {
				continue
			}
			if action.HashPolicy == nil {
				action.HashPolicy = destinationHashPolicy(rc, d.GetDestination())
			}
			wcs = append(wcs, &routev3.WeightedCluster_ClusterWeight{
				Name:   destinationCluster(rc, d.GetDestination()),
				Weight: wrapperspb.UInt32(uint32(d.GetWeight())),
			})
		}
		if len(wcs) == 0 {
			return nil, nil
		}
		action.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: wcs}}
	}
	if t := hr.GetTimeout(); t != nil && t.AsDuration() > 0 {
		action.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: t}
	}
	if rp := grpcRetryPolicy(hr.GetRetries()); rp != nil {
		action.RetryPolicy = rp
	}
	return action, nil
}

// destinationCluster names the outbound cluster of a destination: the port
// given, else the destination service's only port, else the target's port.
func destinationCluster(rc routeContext, d *networking.Destination) string {
	host, port := destinationHostPort(rc, d)
	return clusterName(port, d.GetSubset(), host)
}

// destinationHashPolicy is the header hash policy of a destination's
// traffic policy, nil when it has none.
func destinationHashPolicy(rc routeContext, d *networking.Destination) []*routev3.RouteAction_HashPolicy {
	host, port := destinationHostPort(rc, d)
	return headerHashPolicy(rc.push, rc.proxy, host, d.GetSubset(), port)
}

func destinationHostPort(rc routeContext, d *networking.Destination) (string, uint32) {
	host := model.ResolveShortname(d.GetHost(), rc.vsNamespace, rc.push.DomainSuffix)
	port := d.GetPort().GetNumber()
	if port == 0 {
		if svc := rc.push.ServiceByHost(host); svc != nil && len(svc.Ports) == 1 {
			port = svc.Ports[0].Port
		} else {
			port = rc.target.port.Port
		}
	}
	return host, port
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
