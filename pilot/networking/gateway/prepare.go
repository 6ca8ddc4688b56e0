package gateway

import (
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// forGateway returns a copy of vs (of namespace ns) as a gateway with key
// gwKey sees it: matches whose gateways field does not name the gateway are
// dropped (a route left with no match is dropped), the remaining matches
// lose their gateways field, and destinations without a port get the port
// of their service when it has exactly one, as Istio does. vs is not changed.
func forGateway(vs *networking.VirtualService, ns, gwKey string, push *model.PushContext) *networking.VirtualService {
	out := proto.Clone(vs).(*networking.VirtualService)
	var routes []*networking.HTTPRoute
	for _, h := range out.GetHttp() {
		if len(h.GetMatch()) > 0 {
			var kept []*networking.HTTPMatchRequest
			for _, m := range h.GetMatch() {
				if len(m.GetGateways()) > 0 && !boundTo(m.GetGateways(), ns, gwKey) {
					continue
				}
				m.Gateways = nil
				kept = append(kept, m)
			}
			if len(kept) == 0 {
				continue
			}
			h.Match = kept
		}
		for _, d := range h.GetRoute() {
			defaultPort(d.GetDestination(), ns, push)
		}
		defaultPort(h.GetMirror(), ns, push)
		for _, m := range h.GetMirrors() {
			defaultPort(m.GetDestination(), ns, push)
		}
		routes = append(routes, h)
	}
	out.Http = routes
	return out
}

// defaultPort sets the port of a destination that has none to its
// service's only port.
func defaultPort(d *networking.Destination, ns string, push *model.PushContext) {
	if d == nil || d.GetPort().GetNumber() != 0 {
		return
	}
	if port, ok := onlyPort(d.GetHost(), ns, push); ok {
		d.Port = &networking.PortSelector{Number: port}
	}
}

// onlyPort returns the port of host's service when it has exactly one.
func onlyPort(host, ns string, push *model.PushContext) (uint32, bool) {
	svc := push.ServiceByHost(model.ResolveShortname(host, ns, push.DomainSuffix))
	if svc == nil || len(svc.Ports) != 1 {
		return 0, false
	}
	return svc.Ports[0].Port, true
}
