package route

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
)

// Options says for whom and on which port a VirtualService is translated.
type Options struct {
	// Port is the route configuration's (listener's) port.
	Port uint32
	// Domain is the DNS suffix short hosts resolve with ("cluster.local").
	Domain string
	// ProxyNamespace is the client's namespace, for sourceNamespace matches.
	ProxyNamespace string
	// Labels are the client's labels, for sourceLabels matches; a match with
	// sourceLabels applies only when they all match.
	Labels map[string]string
	// Delegates finds delegate VirtualServices; nil: a delegating route is
	// dropped with a warning.
	Delegates DelegateLookup
	// HashPolicy finds the consistent-hash policy of a destination; nil:
	// routes carry none. A weighted route takes the first destination's
	// policy that is set, as Istio does.
	HashPolicy HashPolicyLookup
}

// Translation is a VirtualService translated into Envoy routes.
type Translation struct {
	Routes []*routev3.Route
	// Origins are, index for index with Routes, the http rules (delegates
	// expanded) each route was made from.
	Origins []ScopedRoute
	// Warnings name every field of the VirtualService (or its delegates)
	// that the routes do not carry.
	Warnings []string
}

// BuildHTTPRoutes translates the http section of a VirtualService of
// namespace ns into Envoy routes for a route configuration of port. Hosts
// are resolved against ns and domain ("cluster.local"). Matches that carry
// sourceLabels or sourceNamespace are dropped, and so are delegating routes:
// use TranslateVirtualService to honour them.
func BuildHTTPRoutes(vs *networking.VirtualService, ns string, port uint32, domain string) ([]*routev3.Route, error) {
	return BuildHTTPRoutesForProxy(vs, ns, port, domain, nil)
}

// BuildHTTPRoutesForProxy is BuildHTTPRoutes for a client workload with the
// given labels: a match with sourceLabels applies only when they all match.
func BuildHTTPRoutesForProxy(vs *networking.VirtualService, ns string, port uint32, domain string, labels map[string]string) ([]*routev3.Route, error) {
	t, err := TranslateVirtualService(vs, ns, Options{Port: port, Domain: domain, Labels: labels})
	return t.Routes, err
}

// TranslateVirtualService translates the http section of a VirtualService
// of namespace ns (delegates expanded) into Envoy routes.
//
// Supported: match uri/headers/withoutHeaders/method/authority/scheme/
// queryParams/port/ignoreUriCase/sourceLabels/sourceNamespace/gateways
// ("mesh")/statPrefix; route (single or weighted destinations, per
// destination headers); redirect; directResponse; delegate; rewrite (uri,
// uriRegexRewrite, authority); timeout; retries; fault; mirror, mirrors,
// mirrorPercentage; headers; corsPolicy. What is not is listed in
// Translation.Warnings (see UnsupportedFields).
func TranslateVirtualService(vs *networking.VirtualService, ns string, opts Options) (Translation, error) {
	var t Translation
	t.Warnings = UnsupportedFields(vs)
	scoped, warns := ExpandDelegates(vs, ns, opts.Delegates)
	t.Warnings = append(t.Warnings, warns...)
	for _, s := range scoped {
		h := s.Route
		action, err := buildAction(h, s.Namespace, opts)
		if err != nil {
			return Translation{}, fmt.Errorf("%s (%q): %w", s.Path, h.GetName(), err)
		}
		if len(h.GetMatch()) == 0 {
			r := &routev3.Route{Name: h.GetName(), Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}}
			if err := action(r); err != nil {
				return Translation{}, fmt.Errorf("%s (%q): %w", s.Path, h.GetName(), err)
			}
			t.Routes = append(t.Routes, r)
			t.Origins = append(t.Origins, s)
			continue
		}
		for j, m := range h.GetMatch() {
			if !matchApplies(m, opts) {
				continue
			}
			rm, err := buildMatch(m)
			if err != nil {
				return Translation{}, fmt.Errorf("%s (%q) match[%d]: %w", s.Path, h.GetName(), j, err)
			}
			name := h.GetName()
			if m.GetName() != "" {
				if name != "" {
					name += "."
				}
				name += m.GetName()
			}
			r := &routev3.Route{Name: name, Match: rm, StatPrefix: m.GetStatPrefix()}
			if err := action(r); err != nil {
				return Translation{}, fmt.Errorf("%s (%q): %w", s.Path, h.GetName(), err)
			}
			t.Routes = append(t.Routes, r)
			t.Origins = append(t.Origins, s)
		}
	}
	return t, nil
}

// buildAction returns a function that sets the action of a route for h,
// and the per-route parts (headers, fault, CORS).
func buildAction(h *networking.HTTPRoute, ns string, opts Options) (func(*routev3.Route) error, error) {
	var set func(*routev3.Route)
	switch {
	case h.GetRedirect() != nil:
		ra, err := redirectAction(h.GetRedirect(), opts.Port)
		if err != nil {
			return nil, err
		}
		set = func(r *routev3.Route) { r.Action = &routev3.Route_Redirect{Redirect: ra} }
	case h.GetDirectResponse() != nil:
		dr := h.GetDirectResponse()
		da := &routev3.DirectResponseAction{Status: dr.GetStatus()}
		if b := dr.GetBody(); b != nil {
			switch {
			case b.GetString_() != "":
				da.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: b.GetString_()}}
			case b.GetBytes() != nil:
				da.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b.GetBytes()}}
			}
		}
		set = func(r *routev3.Route) { r.Action = &routev3.Route_DirectResponse{DirectResponse: da} }
	}
	hdr, err := headerOps(h.GetHeaders())
	if err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	if set == nil {
		ra, dest, err := routeAction(h, ns, opts)
		if err != nil {
			return nil, err
		}
		hdr = hdr.merge(dest)
		set = func(r *routev3.Route) { r.Action = &routev3.Route_Route{Route: ra} }
	}
	filters, err := perFilterConfig(h)
	if err != nil {
		return nil, err
	}
	return func(r *routev3.Route) error {
		set(r)
		r.RequestHeadersToAdd, r.RequestHeadersToRemove = hdr.reqAdd, hdr.reqRemove
		r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = hdr.respAdd, hdr.respRemove
		if hdr.host != "" {
			if ra := r.GetRoute(); ra != nil && ra.GetHostRewriteSpecifier() == nil {
				ra.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: hdr.host}
			}
		}
		r.TypedPerFilterConfig = filters
		return nil
	}, nil
}

// redirectAction translates an HTTPRedirect; port is the route
// configuration's, used for derivePort FROM_REQUEST_PORT as Istio does.
func redirectAction(rd *networking.HTTPRedirect, port uint32) (*routev3.RedirectAction, error) {
	ra := &routev3.RedirectAction{HostRedirect: rd.GetAuthority()}
	switch {
	case rd.GetUri() != "":
		ra.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: rd.GetUri()}
	case rd.GetPrefixRewrite() != "":
		ra.PathRewriteSpecifier = &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: rd.GetPrefixRewrite()}
	}
	if rd.GetScheme() != "" {
		ra.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: rd.GetScheme()}
	}
	switch p := rd.GetRedirectPort().(type) {
	case *networking.HTTPRedirect_Port:
		ra.PortRedirect = p.Port
	case *networking.HTTPRedirect_DerivePort:
		// FROM_PROTOCOL_DEFAULT: no port, Envoy drops it from the Location.
		if p.DerivePort == networking.HTTPRedirect_FROM_REQUEST_PORT {
			ra.PortRedirect = port
		}
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
	return ra, nil
}

// routeAction builds the forwarding action; with a single destination its
// header operations are returned to be applied at the route level.
func routeAction(h *networking.HTTPRoute, ns string, opts Options) (*routev3.RouteAction, headerSet, error) {
	var single headerSet
	if len(h.GetRoute()) == 0 {
		return nil, single, fmt.Errorf("route: empty, and no redirect, directResponse or delegate")
	}
	timeout := durationpb.New(0)
	if h.GetTimeout() != nil {
		timeout = durationpb.New(h.GetTimeout().AsDuration())
	}
	ra := &routev3.RouteAction{
		Timeout: timeout,
		// The grpc-timeout header is honoured, capped by the route timeout
		// (0: uncapped), as Istio's max_grpc_timeout.
		MaxStreamDuration: &routev3.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: durationpb.New(timeout.AsDuration())},
		RetryPolicy:       RetryPolicy(h.GetRetries()),
	}
	var weighted []*routev3.WeightedCluster_ClusterWeight
	for i, d := range h.GetRoute() {
		if d.GetDestination().GetHost() == "" {
			return nil, headerSet{}, fmt.Errorf("route[%d].destination.host: empty", i)
		}
		if d.GetWeight() < 0 {
			return nil, headerSet{}, fmt.Errorf("route[%d].weight: %d is negative", i, d.GetWeight())
		}
		if d.GetWeight() == 0 && len(h.GetRoute()) > 1 {
			continue
		}
		weight := uint32(d.GetWeight())
		if weight == 0 {
			weight = 100
		}
		hdr, err := headerOps(d.GetHeaders())
		if err != nil {
			return nil, headerSet{}, fmt.Errorf("route[%d].headers: %w", i, err)
		}
		host, subset, port := destinationParts(d.GetDestination(), ns, opts.Port, opts.Domain)
		if ra.HashPolicy == nil {
			ra.HashPolicy = opts.HashPolicy.hashPolicy(host, subset, port)
		}
		weighted = append(weighted, &routev3.WeightedCluster_ClusterWeight{
			Name:                    clustername.Build(clustername.Outbound, subset, host, port),
			Weight:                  wrapperspb.UInt32(weight),
			RequestHeadersToAdd:     hdr.reqAdd,
			RequestHeadersToRemove:  hdr.reqRemove,
			ResponseHeadersToAdd:    hdr.respAdd,
			ResponseHeadersToRemove: hdr.respRemove,
		})
		single = hdr
	}
	switch len(weighted) {
	case 0:
		return nil, headerSet{}, fmt.Errorf("route: every destination has weight 0")
	case 1:
		// One destination: its header operations move to the route.
		ra.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: weighted[0].Name}
	default:
		// Per-destination host rewrites have no Envoy field: see UnsupportedFields.
		single = headerSet{}
		ra.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: weighted}}
	}
	if rw := h.GetRewrite(); rw != nil {
		if rw.GetUri() != "" && rw.GetUriRegexRewrite() != nil {
			return nil, headerSet{}, fmt.Errorf("rewrite: uri and uriRegexRewrite are exclusive")
		}
		if rw.GetUri() != "" {
			ra.PrefixRewrite = rw.GetUri()
		}
		if rr := rw.GetUriRegexRewrite(); rr != nil {
			if rr.GetMatch() == "" {
				return nil, headerSet{}, fmt.Errorf("rewrite.uriRegexRewrite.match: empty")
			}
			ra.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{
				Pattern:      &matcherv3.RegexMatcher{Regex: rr.GetMatch()},
				Substitution: rr.GetRewrite(),
			}
		}
		if rw.GetAuthority() != "" {
			ra.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: rw.GetAuthority()}
		}
	}
	mirrors, err := mirrorPolicies(h, ns, opts)
	if err != nil {
		return nil, headerSet{}, err
	}
	ra.RequestMirrorPolicies = mirrors
	return ra, single, nil
}

// destinationCluster names the outbound cluster of a destination; the port
// defaults to the route configuration's.
func destinationCluster(d *networking.Destination, ns string, port uint32, domain string) string {
	host, subset, port := destinationParts(d, ns, port, domain)
	return clustername.Build(clustername.Outbound, subset, host, port)
}

// destinationParts resolves a destination to its FQDN, subset and port (the
// route configuration's when unset).
func destinationParts(d *networking.Destination, ns string, port uint32, domain string) (string, string, uint32) {
	if p := d.GetPort().GetNumber(); p != 0 {
		port = p
	}
	return model.ResolveShortname(d.GetHost(), ns, domain), d.GetSubset(), port
}
