package gateway

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// applyFilter sets on h what filter f does; it returns why f is not
// supported, "" if it is. Unresolvable mirror backends are reported to
// unresolved and the mirror dropped.
func (t *translator) applyFilter(h *networking.HTTPRoute, f gwv1.HTTPRouteFilter, ns string, unresolved func(gwv1.RouteConditionReason, string)) string {
	switch f.Type {
	case gwv1.HTTPRouteFilterRequestHeaderModifier:
		if f.RequestHeaderModifier == nil {
			return "requestHeaderModifier missing"
		}
		if h.Headers == nil {
			h.Headers = &networking.Headers{}
		}
		h.Headers.Request = headerOps(f.RequestHeaderModifier)
	case gwv1.HTTPRouteFilterResponseHeaderModifier:
		if f.ResponseHeaderModifier == nil {
			return "responseHeaderModifier missing"
		}
		if h.Headers == nil {
			h.Headers = &networking.Headers{}
		}
		h.Headers.Response = headerOps(f.ResponseHeaderModifier)
	case gwv1.HTTPRouteFilterRequestRedirect:
		rr := f.RequestRedirect
		if rr == nil {
			return "requestRedirect missing"
		}
		rd := &networking.HTTPRedirect{Scheme: deref(rr.Scheme, ""), Authority: string(deref(rr.Hostname, "")), RedirectCode: 302}
		if rr.StatusCode != nil {
			rd.RedirectCode = uint32(*rr.StatusCode)
		}
		// As istiod: with no port, the request's (the listener's), or
		// the scheme's default when the scheme changes. That also makes
		// a redirect with nothing but a status code valid.
		switch {
		case rr.Port != nil:
			rd.RedirectPort = &networking.HTTPRedirect_Port{Port: uint32(*rr.Port)}
		case rr.Scheme != nil:
			rd.RedirectPort = &networking.HTTPRedirect_DerivePort{DerivePort: networking.HTTPRedirect_FROM_PROTOCOL_DEFAULT}
		default:
			rd.RedirectPort = &networking.HTTPRedirect_DerivePort{DerivePort: networking.HTTPRedirect_FROM_REQUEST_PORT}
		}
		if p := rr.Path; p != nil {
			switch p.Type {
			case gwv1.FullPathHTTPPathModifier:
				rd.Uri = deref(p.ReplaceFullPath, "/")
			case gwv1.PrefixMatchHTTPPathModifier:
				// Set per match by routeRules, as a URLRewrite's
				// prefix: the exact part of a PathPrefix redirects to
				// the replacement, the part below it keeps its rest.
				// An empty replacement is "/" (the spec's trailing-slash
				// rules give both the same result).
				rd.PrefixRewrite = cmp.Or(deref(p.ReplacePrefixMatch, ""), "/")
			default:
				return fmt.Sprintf("requestRedirect.path.type %q", p.Type)
			}
		}
		h.Redirect = rd
	case gwv1.HTTPRouteFilterURLRewrite:
		rw := f.URLRewrite
		if rw == nil {
			return "urlRewrite missing"
		}
		out := &networking.HTTPRewrite{Authority: string(deref(rw.Hostname, ""))}
		if p := rw.Path; p != nil {
			switch p.Type {
			case gwv1.FullPathHTTPPathModifier:
				out.UriRegexRewrite = &networking.RegexRewrite{Match: "/.*", Rewrite: deref(p.ReplaceFullPath, "/")}
			case gwv1.PrefixMatchHTTPPathModifier:
				// Set per match by routeRules (the exact and prefix
				// parts of a PathPrefix rewrite differently).
				out.Uri = deref(p.ReplacePrefixMatch, "/")
			default:
				return fmt.Sprintf("urlRewrite.path.type %q", p.Type)
			}
		}
		h.Rewrite = out
	case gwv1.HTTPRouteFilterRequestMirror:
		m := f.RequestMirror
		if m == nil {
			return "requestMirror missing"
		}
		dest, reason, msg := t.backend(m.BackendRef, ns)
		if dest == nil {
			unresolved(reason, "requestMirror: "+msg)
			return ""
		}
		mp := &networking.HTTPMirrorPolicy{Destination: dest}
		switch {
		case m.Percent != nil:
			mp.Percentage = &networking.Percent{Value: float64(*m.Percent)}
		case m.Fraction != nil:
			den := deref(m.Fraction.Denominator, 100)
			if den <= 0 {
				return "requestMirror.fraction.denominator must be positive"
			}
			mp.Percentage = &networking.Percent{Value: 100 * float64(m.Fraction.Numerator) / float64(den)}
		}
		h.Mirrors = append(h.Mirrors, mp)
	case gwv1.HTTPRouteFilterCORS:
		if f.CORS == nil {
			return "cors missing"
		}
		h.CorsPolicy = corsPolicy(f.CORS)
	default:
		return fmt.Sprintf("filter type %s is not supported", f.Type)
	}
	return ""
}

// corsPolicy is the VirtualService corsPolicy of a CORS filter, as istiod
// builds it: each origin matched exactly (wildcard origins included, as
// istiod), credentials only when allowed, maxAge in seconds.
func corsPolicy(f *gwv1.HTTPCORSFilter) *networking.CorsPolicy {
	p := &networking.CorsPolicy{}
	for _, o := range f.AllowOrigins {
		if o == "" {
			continue
		}
		p.AllowOrigins = append(p.AllowOrigins, &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: string(o)}})
	}
	if deref(f.AllowCredentials, false) {
		p.AllowCredentials = wrapperspb.Bool(true)
	}
	for _, m := range f.AllowMethods {
		p.AllowMethods = append(p.AllowMethods, string(m))
	}
	for _, h := range f.AllowHeaders {
		p.AllowHeaders = append(p.AllowHeaders, string(h))
	}
	for _, h := range f.ExposeHeaders {
		p.ExposeHeaders = append(p.ExposeHeaders, string(h))
	}
	if f.MaxAge > 0 {
		p.MaxAge = durationpb.New(time.Duration(f.MaxAge) * time.Second)
	}
	return p
}

// backendFilter applies a backendRef's filter to its destination: only
// header modifiers are supported there.
func backendFilter(rd *networking.HTTPRouteDestination, f gwv1.HTTPRouteFilter) string {
	switch {
	case f.Type == gwv1.HTTPRouteFilterRequestHeaderModifier && f.RequestHeaderModifier != nil:
		if rd.Headers == nil {
			rd.Headers = &networking.Headers{}
		}
		rd.Headers.Request = headerOps(f.RequestHeaderModifier)
	case f.Type == gwv1.HTTPRouteFilterResponseHeaderModifier && f.ResponseHeaderModifier != nil:
		if rd.Headers == nil {
			rd.Headers = &networking.Headers{}
		}
		rd.Headers.Response = headerOps(f.ResponseHeaderModifier)
	default:
		return fmt.Sprintf("backendRef filter type %s is not supported", f.Type)
	}
	return ""
}

func headerOps(f *gwv1.HTTPHeaderFilter) *networking.Headers_HeaderOperations {
	ops := &networking.Headers_HeaderOperations{}
	for _, h := range f.Set {
		if ops.Set == nil {
			ops.Set = map[string]string{}
		}
		ops.Set[strings.ToLower(string(h.Name))] = h.Value
	}
	for _, h := range f.Add {
		if ops.Add == nil {
			ops.Add = map[string]string{}
		}
		ops.Add[strings.ToLower(string(h.Name))] = h.Value
	}
	for _, h := range f.Remove {
		ops.Remove = append(ops.Remove, strings.ToLower(h))
	}
	return ops
}

// backend resolves a backendRef of an HTTPRoute of namespace ns (see
// backendFor).
func (t *translator) backend(ref gwv1.BackendObjectReference, ns string) (*networking.Destination, gwv1.RouteConditionReason, string) {
	return t.backendFor(KindHTTPRoute, ref, ns)
}

// backendFor resolves a backendRef of a route of fromKind and namespace ns to
// a destination, or says why it cannot: InvalidKind (not a core Service),
// RefNotPermitted (another namespace without a ReferenceGrant from routes
// of that kind) or BackendNotFound (no such Service or port).
func (t *translator) backendFor(fromKind string, ref gwv1.BackendObjectReference, ns string) (*networking.Destination, gwv1.RouteConditionReason, string) {
	group, kind := normGroup(string(deref(ref.Group, ""))), string(deref(ref.Kind, kindService))
	if group != "" || kind != kindService {
		return nil, gwv1.RouteReasonInvalidKind, fmt.Sprintf("%s %s: only core Services are supported", kind, ref.Name)
	}
	toNS := string(deref(ref.Namespace, gwv1.Namespace(ns)))
	if !t.grants.allows(objRef{Group, fromKind, ns, ""}, objRef{"", kindService, toNS, string(ref.Name)}) {
		return nil, gwv1.RouteReasonRefNotPermitted, fmt.Sprintf("no ReferenceGrant in %s allows %ss of %s to refer to Service %s", toNS, fromKind, ns, ref.Name)
	}
	host := fmt.Sprintf("%s.%s.svc.%s", ref.Name, toNS, t.in.domain())
	if ref.Port == nil {
		return nil, gwv1.RouteReasonBackendNotFound, fmt.Sprintf("Service %s/%s: port is required", toNS, ref.Name)
	}
	if t.in.Service != nil {
		svc := t.in.Service(host)
		if svc == nil {
			return nil, gwv1.RouteReasonBackendNotFound, fmt.Sprintf("Service %s/%s not found", toNS, ref.Name)
		}
		if _, ok := svc.PortByNumber(uint32(*ref.Port)); !ok {
			return nil, gwv1.RouteReasonBackendNotFound, fmt.Sprintf("Service %s/%s has no port %d", toNS, ref.Name, *ref.Port)
		}
	}
	return &networking.Destination{Host: host, Port: &networking.PortSelector{Number: uint32(*ref.Port)}}, "", ""
}

func cloneRoute(h *networking.HTTPRoute) *networking.HTTPRoute {
	return proto.Clone(h).(*networking.HTTPRoute)
}

func cloneMatch(m *networking.HTTPMatchRequest) *networking.HTTPMatchRequest {
	return proto.Clone(m).(*networking.HTTPMatchRequest)
}
