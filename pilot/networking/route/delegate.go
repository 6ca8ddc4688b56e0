package route

import (
	"fmt"
	"maps"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// DelegateLookup returns the VirtualService namespace/name, if it exists.
type DelegateLookup func(name, namespace string) (*networking.VirtualService, bool)

// PushDelegates finds delegate VirtualServices among every VirtualService
// of push.
func PushDelegates(push *model.PushContext) DelegateLookup {
	return func(name, ns string) (*networking.VirtualService, bool) {
		for _, c := range push.VirtualServices() {
			if c.Name == name && c.Namespace == ns {
				vs, ok := c.Spec.(*networking.VirtualService)
				return vs, ok
			}
		}
		return nil, false
	}
}

// ScopedRoute is an HTTP route with the namespace its short destination
// hosts resolve in: the VirtualService's own, or a delegate's.
type ScopedRoute struct {
	Route     *networking.HTTPRoute
	Namespace string
	// Path locates the route for errors: "http[1]", "http[1].delegate(ns/name).http[0]".
	Path string
	// Index is the position of the root VirtualService's http rule.
	Index int
	// Delegate, for a delegate's route, is the delegate VirtualService
	// ("namespace/name") and DelegateIndex the position of its http rule.
	Delegate      string
	DelegateIndex int
}

// ExpandDelegates returns the http routes of vs (namespace ns) in order,
// each route with a delegate replaced by the delegate's routes, following
// Istio's semantics:
//   - the delegate is delegate.namespace/delegate.name (namespace defaults
//     to ns); it must exist and have no hosts, else the route is dropped
//     with a warning; a delegate's own delegates are dropped (one level);
//   - a delegate route without match inherits the root route's matches; one
//     with matches gets each (root match × delegate match) merged, and a
//     pair that conflicts (uri, scheme, method or authority outside the
//     root's, a header, query parameter, port, source label or source
//     namespace given different values) is dropped; a delegate route left
//     without any match is dropped;
//   - the delegate route's own settings win; the root's rewrite, timeout,
//     retries, fault, mirror(s), corsPolicy and headers fill what it leaves
//     unset; names join as "root-delegate".
//
// The routes returned are copies: vs and the delegates are not modified.
func ExpandDelegates(vs *networking.VirtualService, ns string, lookup DelegateLookup) ([]ScopedRoute, []string) {
	var out []ScopedRoute
	var warns []string
	for i, h := range vs.GetHttp() {
		path := fmt.Sprintf("http[%d]", i)
		d := h.GetDelegate()
		if d == nil {
			out = append(out, ScopedRoute{Route: h, Namespace: ns, Path: path, Index: i})
			continue
		}
		dns := d.GetNamespace()
		if dns == "" {
			dns = ns
		}
		if lookup == nil {
			warns = append(warns, fmt.Sprintf("%s.delegate: not supported here, route dropped", path))
			continue
		}
		dvs, ok := lookup(d.GetName(), dns)
		if !ok {
			warns = append(warns, fmt.Sprintf("%s.delegate: VirtualService %s/%s not found, route dropped", path, dns, d.GetName()))
			continue
		}
		if len(dvs.GetHosts()) > 0 {
			warns = append(warns, fmt.Sprintf("%s.delegate: VirtualService %s/%s has hosts, so it cannot be a delegate; route dropped", path, dns, d.GetName()))
			continue
		}
		warns = append(warns, prefixed(fmt.Sprintf("%s.delegate(%s/%s).", path, dns, d.GetName()), UnsupportedFields(dvs))...)
		for j, dh := range dvs.GetHttp() {
			dpath := fmt.Sprintf("%s.delegate(%s/%s).http[%d]", path, dns, d.GetName(), j)
			if dh.GetDelegate() != nil {
				warns = append(warns, dpath+".delegate: nested delegation is not supported, route dropped")
				continue
			}
			merged, ok := mergeDelegateRoute(h, dh)
			if !ok {
				continue
			}
			out = append(out, ScopedRoute{Route: merged, Namespace: dns, Path: dpath, Index: i, Delegate: dns + "/" + d.GetName(), DelegateIndex: j})
		}
	}
	return out, warns
}

func prefixed(p string, list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = p + s
	}
	return out
}

// mergeDelegateRoute returns a copy of delegate with root's matches and
// settings merged in; false when every match conflicts.
func mergeDelegateRoute(root, delegate *networking.HTTPRoute) (*networking.HTTPRoute, bool) {
	out := proto.Clone(delegate).(*networking.HTTPRoute)
	switch {
	case len(root.GetMatch()) == 0:
	case len(delegate.GetMatch()) == 0:
		out.Match = cloneMatches(root.GetMatch())
	default:
		out.Match = nil
		for _, rm := range root.GetMatch() {
			for _, dm := range delegate.GetMatch() {
				if m, ok := mergeMatch(rm, dm); ok {
					out.Match = append(out.Match, m)
				}
			}
		}
		if len(out.Match) == 0 {
			return nil, false
		}
	}
	switch {
	case out.Name == "":
		out.Name = root.GetName()
	case root.GetName() != "":
		out.Name = root.GetName() + "-" + out.Name
	}
	if out.Rewrite == nil {
		out.Rewrite = root.GetRewrite()
	}
	if out.Timeout == nil {
		out.Timeout = root.GetTimeout()
	}
	if out.Retries == nil {
		out.Retries = root.GetRetries()
	}
	if out.Fault == nil {
		out.Fault = root.GetFault()
	}
	if out.Mirror == nil && len(out.Mirrors) == 0 {
		out.Mirror, out.Mirrors = root.GetMirror(), root.GetMirrors()
		out.MirrorPercentage, out.MirrorPercent = root.GetMirrorPercentage(), root.GetMirrorPercent()
	}
	if out.CorsPolicy == nil {
		out.CorsPolicy = root.GetCorsPolicy()
	}
	if out.Headers == nil {
		out.Headers = root.GetHeaders()
	}
	return out, true
}

func cloneMatches(in []*networking.HTTPMatchRequest) []*networking.HTTPMatchRequest {
	out := make([]*networking.HTTPMatchRequest, len(in))
	for i, m := range in {
		out[i] = proto.Clone(m).(*networking.HTTPMatchRequest)
	}
	return out
}

// mergeMatch narrows root match r by delegate match d; false on conflict.
func mergeMatch(r, d *networking.HTTPMatchRequest) (*networking.HTTPMatchRequest, bool) {
	out := proto.Clone(d).(*networking.HTTPMatchRequest)
	var ok bool
	if out.Uri, ok = narrow(r.GetUri(), d.GetUri()); !ok {
		return nil, false
	}
	if out.Scheme, ok = narrow(r.GetScheme(), d.GetScheme()); !ok {
		return nil, false
	}
	if out.Method, ok = narrow(r.GetMethod(), d.GetMethod()); !ok {
		return nil, false
	}
	if out.Authority, ok = narrow(r.GetAuthority(), d.GetAuthority()); !ok {
		return nil, false
	}
	if out.Headers, ok = mergeStringMatches(r.GetHeaders(), d.GetHeaders()); !ok {
		return nil, false
	}
	if out.WithoutHeaders, ok = mergeStringMatches(r.GetWithoutHeaders(), d.GetWithoutHeaders()); !ok {
		return nil, false
	}
	if out.QueryParams, ok = mergeStringMatches(r.GetQueryParams(), d.GetQueryParams()); !ok {
		return nil, false
	}
	if out.SourceLabels, ok = mergeMaps(r.GetSourceLabels(), d.GetSourceLabels()); !ok {
		return nil, false
	}
	if out.Port, ok = either(r.GetPort(), d.GetPort()); !ok {
		return nil, false
	}
	if out.SourceNamespace, ok = either(r.GetSourceNamespace(), d.GetSourceNamespace()); !ok {
		return nil, false
	}
	if r.GetIgnoreUriCase() != d.GetIgnoreUriCase() && r.GetUri() != nil && d.GetUri() != nil {
		return nil, false
	}
	out.IgnoreUriCase = r.GetIgnoreUriCase() || d.GetIgnoreUriCase()
	if len(out.Gateways) == 0 {
		out.Gateways = r.GetGateways()
	}
	switch {
	case out.Name == "":
		out.Name = r.GetName()
	case r.GetName() != "":
		out.Name = r.GetName() + "-" + out.Name
	}
	return out, true
}

// narrow returns the delegate's string match when it lies within the
// root's (equal, or an exact/prefix value under the root's prefix), the
// set one when only one is set; false otherwise (regexes must be equal).
func narrow(r, d *networking.StringMatch) (*networking.StringMatch, bool) {
	switch {
	case r == nil || r.GetMatchType() == nil:
		return d, true
	case d == nil || d.GetMatchType() == nil:
		return r, true
	case proto.Equal(r, d):
		return d, true
	}
	if rp := r.GetPrefix(); rp != "" {
		if dp := d.GetPrefix(); dp != "" && strings.HasPrefix(dp, rp) {
			return d, true
		}
		if de := d.GetExact(); de != "" && strings.HasPrefix(de, rp) {
			return d, true
		}
	}
	return nil, false
}

func mergeStringMatches(r, d map[string]*networking.StringMatch) (map[string]*networking.StringMatch, bool) {
	if len(r) == 0 && len(d) == 0 {
		return nil, true
	}
	out := maps.Clone(d)
	if out == nil {
		out = map[string]*networking.StringMatch{}
	}
	for k, v := range r {
		if dv, dup := out[k]; dup {
			if !proto.Equal(v, dv) {
				return nil, false
			}
			continue
		}
		out[k] = v
	}
	return out, true
}

func mergeMaps(r, d map[string]string) (map[string]string, bool) {
	if len(r) == 0 && len(d) == 0 {
		return nil, true
	}
	out := maps.Clone(d)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range r {
		if dv, dup := out[k]; dup && dv != v {
			return nil, false
		}
		out[k] = v
	}
	return out, true
}

func either[T comparable](r, d T) (T, bool) {
	var zero T
	switch {
	case r == zero:
		return d, true
	case d == zero || d == r:
		return r, true
	}
	return zero, false
}
