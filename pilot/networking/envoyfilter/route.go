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
	out, ok := run(ps, "route configuration "+rc.GetName(), rc, steps, func(rc *routev3.RouteConfiguration, p *patch) (outcome, error) {
		prc, o, err := ps.patchRouteConfig(ctx, rc, info, p)
		if err != nil || o != changed {
			return unchanged, err
		}
		if prc != rc {
			proto.Reset(rc)
			proto.Merge(rc, prc)
		}
		return changed, nil
	})
	if !ok {
		return rc // route configurations cannot be removed
	}
	return out
}

// patchRouteConfig applies one route patch to rc; it may change rc in
// place and returns the result.
func (ps *Patches) patchRouteConfig(_ Context, rc *routev3.RouteConfiguration, info RouteInfo, p *patch) (*routev3.RouteConfiguration, outcome, error) {
	if !routeConfigMatches(rc, info, p) {
		return rc, unchanged, nil
	}
	vm := p.match.GetRouteConfiguration().GetVhost()
	switch p.applyTo() {
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		m := proto.Clone(rc).(*routev3.RouteConfiguration)
		if err := p.mergeInto(m); err != nil {
			return rc, unchanged, err
		}
		return m, changed, nil
	case networking.EnvoyFilter_VIRTUAL_HOST:
		if p.op == opAdd {
			rc.VirtualHosts = append(rc.VirtualHosts, proto.Clone(p.value).(*routev3.VirtualHost))
			return rc, changed, nil
		}
		vhs, o, err := listOp(rc.VirtualHosts, p, func(vh *routev3.VirtualHost) bool { return vhostMatches(vh, vm) })
		if err == nil {
			rc.VirtualHosts = vhs
		}
		return rc, o, err
	case networking.EnvoyFilter_HTTP_ROUTE:
		rm := vm.GetRoute()
		result := unchanged
		for i, vh := range rc.VirtualHosts {
			if !vhostMatches(vh, vm) {
				continue
			}
			var (
				routes []*routev3.Route
				o      outcome
				err    error
			)
			if p.op == opInsertFirst {
				routes, o = insertAt(append([]*routev3.Route{}, vh.Routes...), 0, proto.Clone(p.value).(*routev3.Route)), changed
			} else {
				routes, o, err = listOp(append([]*routev3.Route{}, vh.Routes...), p, func(r *routev3.Route) bool { return routeMatches(r, rm) })
			}
			if err != nil {
				return rc, unchanged, err
			}
			if o == changed {
				nvh := proto.Clone(vh).(*routev3.VirtualHost)
				nvh.Routes = routes
				rc.VirtualHosts[i] = nvh
				result = changed
			}
		}
		return rc, result, nil
	}
	return rc, unchanged, nil
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
