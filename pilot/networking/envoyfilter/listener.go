package envoyfilter

import (
	"fmt"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

const (
	hcmName = "envoy.filters.network.http_connection_manager"
	// Names of the virtual listeners, where match.listener.portNumber
	// selects filter chains by destination port instead.
	virtualInbound  = "virtualInbound"
	virtualOutbound = "virtualOutbound"
)

// listenerKinds are the applyTo kinds patched inside a listener, in the
// order Istio applies them. Route kinds patch route configurations inline
// in an HTTP connection manager.
func listenerKinds() [8]applyTo {
	return [...]applyTo{
		networking.EnvoyFilter_LISTENER, networking.EnvoyFilter_LISTENER_FILTER, networking.EnvoyFilter_FILTER_CHAIN,
		networking.EnvoyFilter_NETWORK_FILTER, networking.EnvoyFilter_HTTP_FILTER,
		networking.EnvoyFilter_ROUTE_CONFIGURATION, networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_HTTP_ROUTE,
	}
}

// listenerSteps are the patches of ctx that may change l, in order. The
// checks are cheap ones, so that listeners no patch touches are neither
// copied nor validated.
func (ps *Patches) listenerSteps(ctx Context, l *listenerv3.Listener) []*patch {
	var steps []*patch
	for _, k := range listenerKinds() {
		for _, p := range ps.of(ctx, k) {
			if k == networking.EnvoyFilter_LISTENER && p.op == opAdd {
				continue // AddedListeners
			}
			if mayPatchListener(l, p) {
				steps = append(steps, p)
			}
		}
	}
	return steps
}

// mayPatchListener reports whether p may change l: its listener matches
// and, for patches inside filter chains, some chain matches (and, for
// HTTP filters and routes, has an HTTP connection manager).
func mayPatchListener(l *listenerv3.Listener, p *patch) bool {
	if !listenerMatches(l, p) {
		return false
	}
	switch p.applyTo() {
	case networking.EnvoyFilter_LISTENER, networking.EnvoyFilter_LISTENER_FILTER, networking.EnvoyFilter_FILTER_CHAIN:
		return true
	}
	for _, fc := range chains(l) {
		if !filterChainMatches(l, fc, p) {
			continue
		}
		if p.applyTo() == networking.EnvoyFilter_NETWORK_FILTER {
			return true
		}
		for _, f := range fc.GetFilters() {
			if canonicalFilterName(f.GetName()) == hcmName {
				return true
			}
		}
	}
	return false
}

// Listener returns l patched for ctx: l itself when nothing applies, a
// patched copy otherwise, ok false when a patch removes it. l is not changed.
func (ps *Patches) Listener(ctx Context, l *listenerv3.Listener) (out *listenerv3.Listener, ok bool) {
	out, ok, _ = ps.listener(ctx, l)
	return out, ok
}

// listener is Listener, with what applying the patches cost.
func (ps *Patches) listener(ctx Context, l *listenerv3.Listener) (*listenerv3.Listener, bool, applyStats) {
	if ps == nil {
		return l, true, applyStats{}
	}
	return runStats(ps, "listener "+l.GetName(), l, ps.listenerSteps(ctx, l), func(l *listenerv3.Listener, p *patch, b *batch) (outcome, error) {
		return ps.patchListener(ctx, l, p, b)
	})
}

// Listeners patches ls for ctx (see Listener), drops removed ones and
// appends the listeners ADD patches of ctx create.
func (ps *Patches) Listeners(ctx Context, ls []*listenerv3.Listener) []*listenerv3.Listener {
	if ps == nil {
		return ls
	}
	out := make([]*listenerv3.Listener, 0, len(ls))
	for _, l := range ls {
		if pl, ok := ps.Listener(ctx, l); ok {
			out = append(out, pl)
		}
	}
	return append(out, ps.AddedListeners(ctx)...)
}

// AddedListeners returns the listeners LISTENER ADD patches of ctx create.
func (ps *Patches) AddedListeners(ctx Context) []*listenerv3.Listener {
	return added[*listenerv3.Listener](ps, ps.of(ctx, networking.EnvoyFilter_LISTENER), "new listener")
}

// patchListener applies one patch to l. Connection managers stay decoded
// in b between HTTP_FILTER and route patches.
func (ps *Patches) patchListener(ctx Context, l *listenerv3.Listener, p *patch, b *batch) (outcome, error) {
	if !listenerMatches(l, p) {
		return unchanged, nil
	}
	switch p.applyTo() {
	case networking.EnvoyFilter_HTTP_FILTER, networking.EnvoyFilter_ROUTE_CONFIGURATION,
		networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_HTTP_ROUTE:
	default:
		// These act on the listener's messages: encode what is decoded.
		if err := b.flush(); err != nil {
			return unchanged, &partialError{err}
		}
	}
	switch p.applyTo() {
	case networking.EnvoyFilter_LISTENER:
		if p.op == opRemove {
			return removed, nil
		}
		if err := mergeWhole(l, p, b); err != nil {
			return unchanged, err
		}
		return changed, nil
	case networking.EnvoyFilter_LISTENER_FILTER:
		name := p.match.GetListener().GetListenerFilter()
		lfs, o, err := listOp(l.ListenerFilters, p, func(f *listenerv3.ListenerFilter) bool {
			return name == "" || f.GetName() == name
		}, b)
		if err == nil {
			l.ListenerFilters = lfs
		}
		return o, err
	case networking.EnvoyFilter_FILTER_CHAIN:
		return patchFilterChains(l, p, b)
	}
	// Network filters, HTTP filters and inline routes: per matching chain,
	// kept only when every chain could be patched.
	result := unchanged
	var commits []func()
	for _, fc := range chains(l) {
		if !filterChainMatches(l, fc, p) {
			continue
		}
		var o outcome
		var err error
		switch p.applyTo() {
		case networking.EnvoyFilter_NETWORK_FILTER:
			o, err = patchNetworkFilters(fc, p, b, &commits)
		default:
			o, err = ps.patchHCMs(ctx, l, fc, p, b, &commits)
		}
		if err != nil {
			return unchanged, fmt.Errorf("filter chain %q: %w", fc.GetName(), err)
		}
		if o == changed {
			result = changed
		}
	}
	for _, c := range commits {
		c()
	}
	return result, nil
}

// chains returns l's filter chains, the default one last.
func chains(l *listenerv3.Listener) []*listenerv3.FilterChain {
	if l.DefaultFilterChain == nil {
		return l.FilterChains
	}
	return append(append([]*listenerv3.FilterChain{}, l.FilterChains...), l.DefaultFilterChain)
}

func patchFilterChains(l *listenerv3.Listener, p *patch, b *batch) (outcome, error) {
	if p.op == opAdd {
		if err := b.checkValue(p); err != nil {
			return unchanged, err
		}
		l.FilterChains = append(l.FilterChains, proto.Clone(p.value).(*listenerv3.FilterChain))
		return changed, nil
	}
	match := func(fc *listenerv3.FilterChain) bool { return filterChainMatches(l, fc, p) }
	fcs, o, err := listOp(l.FilterChains, p, match, b)
	if err != nil {
		return unchanged, err
	}
	def := l.DefaultFilterChain
	if d := l.DefaultFilterChain; d != nil && match(d) {
		switch p.op {
		case opRemove:
			def, o = nil, changed
		case opMerge, opMergeLists:
			m := proto.Clone(d).(*listenerv3.FilterChain)
			if err := p.mergeInto(m); err != nil {
				return unchanged, err
			}
			if err := b.check(m); err != nil {
				return unchanged, err
			}
			def, o = m, changed
		}
	}
	l.FilterChains, l.DefaultFilterChain = fcs, def
	return o, nil
}

// patchNetworkFilters applies p to fc's filters, adding the change to commits.
func patchNetworkFilters(fc *listenerv3.FilterChain, p *patch, b *batch, commits *[]func()) (outcome, error) {
	name := p.match.GetListener().GetFilterChain().GetFilter().GetName()
	fs, o, err := listOp(fc.Filters, p, func(f *listenerv3.Filter) bool {
		return name == "" || canonicalFilterName(f.GetName()) == canonicalFilterName(name)
	}, b)
	if err != nil {
		return unchanged, err
	}
	if o == changed {
		*commits = append(*commits, func() { fc.Filters = fs })
	}
	return o, nil
}

// patchHCMs applies an HTTP_FILTER or route patch to every HTTP connection
// manager of fc that the patch's filter match names, adding the changes to
// commits. The connection managers are decoded once per batch (b.open)
// and encoded by b.flush.
func (ps *Patches) patchHCMs(ctx Context, l *listenerv3.Listener, fc *listenerv3.FilterChain, p *patch, b *batch, commits *[]func()) (outcome, error) {
	fm := p.match.GetListener().GetFilterChain().GetFilter()
	if n := fm.GetName(); n != "" && canonicalFilterName(n) != hcmName {
		return unchanged, nil
	}
	result := unchanged
	for _, f := range fc.Filters {
		if canonicalFilterName(f.GetName()) != hcmName || f.GetTypedConfig() == nil {
			continue
		}
		oh, err := b.open(f)
		if err != nil {
			return unchanged, err
		}
		h := oh.h
		var o outcome
		if p.applyTo() == networking.EnvoyFilter_HTTP_FILTER {
			sub := canonicalFilterName(fm.GetSubFilter().GetName())
			hfs, oo, err := listOp(h.HttpFilters, p, func(hf *hcm.HttpFilter) bool {
				return sub == "" || canonicalFilterName(hf.GetName()) == sub
			}, b)
			if err != nil {
				return unchanged, err
			}
			if o = oo; o == changed {
				*commits = append(*commits, func() { h.HttpFilters, oh.dirty = hfs, true })
			}
		} else {
			rc := h.GetRouteConfig()
			if rc == nil {
				continue // RDS: patched by the route generators
			}
			info := RouteInfo{Port: chainPort(l, fc)}
			if o, err = ps.patchRouteConfig(ctx, rc, info, p, b, commits); err != nil {
				return unchanged, err
			}
			if o == changed {
				// In place outside strict mode: dirty at once.
				oh.dirty = true
			}
		}
		if o == changed {
			result = changed
		}
	}
	return result, nil
}

// chainPort is the port a chain serves: its destination port match, else
// the listener's port.
func chainPort(l *listenerv3.Listener, fc *listenerv3.FilterChain) uint32 {
	if p := fc.GetFilterChainMatch().GetDestinationPort().GetValue(); p != 0 {
		return p
	}
	return l.GetAddress().GetSocketAddress().GetPortValue()
}

// listenerMatches checks match.listener name and portNumber.
func listenerMatches(l *listenerv3.Listener, p *patch) bool {
	lm := p.match.GetListener()
	if lm == nil {
		return true
	}
	if lm.GetName() != "" && lm.GetName() != l.GetName() {
		return false
	}
	if lm.GetPortNumber() == 0 {
		return true
	}
	if isVirtual(l) && lm.GetListenerFilter() == "" {
		return true // the port selects filter chains (filterChainMatches)
	}
	return l.GetAddress().GetSocketAddress().GetPortValue() == lm.GetPortNumber()
}

func isVirtual(l *listenerv3.Listener) bool {
	return l.GetName() == virtualInbound || l.GetName() == virtualOutbound
}

// filterChainMatches checks match.listener.filterChain (and, on the
// virtual listeners, portNumber against the chain's destination port).
func filterChainMatches(l *listenerv3.Listener, fc *listenerv3.FilterChain, p *patch) bool {
	lm := p.match.GetListener()
	if lm == nil {
		return true
	}
	fcm := fc.GetFilterChainMatch()
	if lm.GetPortNumber() != 0 && isVirtual(l) && fcm.GetDestinationPort().GetValue() != lm.GetPortNumber() {
		return false
	}
	m := lm.GetFilterChain()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != fc.GetName() {
		return false
	}
	if m.GetSni() != "" && !contains(fcm.GetServerNames(), m.GetSni()) {
		return false
	}
	if m.GetTransportProtocol() != "" && m.GetTransportProtocol() != fcm.GetTransportProtocol() {
		return false
	}
	if aps := m.GetApplicationProtocols(); aps != "" {
		for _, ap := range strings.Split(aps, ",") {
			if !contains(fcm.GetApplicationProtocols(), strings.TrimSpace(ap)) {
				return false
			}
		}
	}
	if m.GetDestinationPort() != 0 && m.GetDestinationPort() != fcm.GetDestinationPort().GetValue() {
		return false
	}
	if n := m.GetFilter().GetName(); n != "" {
		found := false
		for _, f := range fc.GetFilters() {
			if canonicalFilterName(f.GetName()) == canonicalFilterName(n) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// canonicalFilterName maps the deprecated filter names EnvoyFilters still
// use to the ones the generators emit.
func canonicalFilterName(n string) string {
	switch n {
	case "envoy.http_connection_manager":
		return hcmName
	case "envoy.tcp_proxy":
		return "envoy.filters.network.tcp_proxy"
	case "envoy.router":
		return "envoy.filters.http.router"
	case "envoy.cors":
		return "envoy.filters.http.cors"
	case "envoy.fault":
		return "envoy.filters.http.fault"
	case "envoy.lua":
		return "envoy.filters.http.lua"
	case "envoy.ext_authz":
		return "envoy.filters.http.ext_authz"
	case "envoy.filters.listener.tls_inspector", "envoy.listener.tls_inspector":
		return "envoy.filters.listener.tls_inspector"
	case "envoy.listener.http_inspector":
		return "envoy.filters.listener.http_inspector"
	}
	return n
}
