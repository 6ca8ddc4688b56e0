package envoyfilter

import (
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// RouteInfo is what a route configuration's match needs besides the route
// configuration itself.
type RouteInfo struct {
	// Port is the port the routes serve (match portNumber).
	Port uint32
	// PortName is the gateway server's port name (match portName).
	PortName string
	// Gateway is the gateway ("namespace/name") of a gateway's route
	// configuration (match gateway).
	Gateway string
}

// RouteInfoFor derives the match inputs from a route configuration name:
// "9080" (sidecar outbound), "http.80", "https.443.PORTNAME.GATEWAY.NS".
func RouteInfoFor(name string) RouteInfo {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return RouteInfo{Port: uint32(n)}
	}
	if rest, ok := strings.CutPrefix(name, "http."); ok {
		n, _ := strconv.ParseUint(rest, 10, 32)
		return RouteInfo{Port: uint32(n)}
	}
	if rest, ok := strings.CutPrefix(name, "https."); ok {
		parts := strings.SplitN(rest, ".", 4)
		var info RouteInfo
		if n, err := strconv.ParseUint(parts[0], 10, 32); err == nil {
			info.Port = uint32(n)
		}
		if len(parts) == 4 {
			info.PortName = parts[1]
			info.Gateway = parts[3] + "/" + parts[2]
		}
		return info
	}
	// "outbound|9080||host" style names, or a Sidecar's bind "ADDR_PORT".
	if i := strings.LastIndexAny(name, "_:"); i >= 0 {
		if n, err := strconv.ParseUint(name[i+1:], 10, 32); err == nil {
			return RouteInfo{Port: uint32(n)}
		}
	}
	return RouteInfo{}
}

// routeKinds are the applyTo kinds of route configurations, in order.
func routeKinds() [3]applyTo {
	return [...]applyTo{networking.EnvoyFilter_ROUTE_CONFIGURATION, networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_HTTP_ROUTE}
}

// RouteConfiguration returns rc patched for ctx: rc itself when nothing
// applies, else a patched copy. rc is not changed.
func (ps *Patches) RouteConfiguration(ctx Context, rc *routev3.RouteConfiguration, info RouteInfo) *routev3.RouteConfiguration {
	if ps == nil {
		return rc
	}
	var steps []*patch
	for _, k := range routeKinds() {
		for _, p := range ps.of(ctx, k) {
			if routeConfigMatches(rc, info, p) {
				steps = append(steps, p)
			}
		}
	}
	out, ok := run(ps, "route configuration "+rc.GetName(), rc, steps, func(rc *routev3.RouteConfiguration, p *patch, b *batch) (outcome, error) {
		var commits []func()
		o, err := ps.patchRouteConfig(ctx, rc, info, p, b, &commits)
		if err != nil || o != changed {
			return unchanged, err
		}
		for _, c := range commits {
			c()
		}
		return changed, nil
	})
	if !ok {
		return rc // route configurations cannot be removed
	}
	return out
}

// patchRouteConfig applies one route patch to rc, a copy private to the
// batch b: list changes are added to commits (kept only when every part of
// the patch applied), a MERGE of rc itself is made at once outside strict
// mode (see mergeWhole).
func (ps *Patches) patchRouteConfig(_ Context, rc *routev3.RouteConfiguration, info RouteInfo, p *patch, b *batch, commits *[]func()) (outcome, error) {
	if !routeConfigMatches(rc, info, p) {
		return unchanged, nil
	}
	vm := p.match.GetRouteConfiguration().GetVhost()
	switch p.applyTo() {
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		if !b.strict {
			if err := p.mergeInto(rc); err != nil {
				return unchanged, &partialError{err}
			}
			return changed, nil
		}
		m := proto.Clone(rc).(*routev3.RouteConfiguration)
		if err := p.mergeInto(m); err != nil {
			return unchanged, err
		}
		if err := b.check(m); err != nil {
			return unchanged, err
		}
		*commits = append(*commits, func() { move(rc, m) })
		return changed, nil
	case networking.EnvoyFilter_VIRTUAL_HOST:
		if p.op == opAdd {
			if err := b.checkValue(p); err != nil {
				return unchanged, err
			}
			v := proto.Clone(p.value).(*routev3.VirtualHost)
			*commits = append(*commits, func() { rc.VirtualHosts = append(rc.VirtualHosts, v) })
			return changed, nil
		}
		vhs, o, err := listOp(rc.VirtualHosts, p, func(vh *routev3.VirtualHost) bool { return vhostMatches(vh, vm) }, b)
		if err != nil {
			return unchanged, err
		}
		if o == changed {
			*commits = append(*commits, func() { rc.VirtualHosts = vhs })
		}
		return o, nil
	case networking.EnvoyFilter_HTTP_ROUTE:
		rm := vm.GetRoute()
		result := unchanged
		for _, vh := range rc.VirtualHosts {
			if !vhostMatches(vh, vm) {
				continue
			}
			routes, o, err := listOp(vh.Routes, p, func(r *routev3.Route) bool { return routeMatches(r, rm) }, b)
			if err != nil {
				return unchanged, err
			}
			if o == changed {
				*commits = append(*commits, func() { vh.Routes = routes })
				result = changed
			}
		}
		return result, nil
	}
	return unchanged, nil
}

func routeConfigMatches(rc *routev3.RouteConfiguration, info RouteInfo, p *patch) bool {
	m := p.match.GetRouteConfiguration()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != rc.GetName() {
		return false
	}
	if m.GetPortNumber() != 0 && m.GetPortNumber() != info.Port {
		return false
	}
	if m.GetPortName() != "" && m.GetPortName() != info.PortName {
		return false
	}
	if m.GetGateway() != "" && m.GetGateway() != info.Gateway {
		return false
	}
	return true
}

func vhostMatches(vh *routev3.VirtualHost, m *networking.EnvoyFilter_RouteConfigurationMatch_VirtualHostMatch) bool {
	return m.GetName() == "" || m.GetName() == vh.GetName()
}

func routeMatches(r *routev3.Route, m *networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch) bool {
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != r.GetName() {
		return false
	}
	switch m.GetAction() {
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ROUTE:
		return r.GetRoute() != nil
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_REDIRECT:
		return r.GetRedirect() != nil
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_DIRECT_RESPONSE:
		return r.GetDirectResponse() != nil
	}
	return true
}
