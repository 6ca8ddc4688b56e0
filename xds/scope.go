package xds

import (
	"strings"

	"github.com/meshpilot/meshpilot/model"
)

// Push scoping: a push reaches only the proxies whose view a change touches,
// and regenerates only the types the change can alter.
//
// Which types a change of each kind can alter for a sidecar (gRPC clients,
// whose generators differ, get every watched type on a full push):
//
//	kind                         CDS  EDS  LDS  RDS  other
//	Endpoints (EDS-only)               x
//	Service                       x    x    x    x
//	DestinationRule               x    x
//	VirtualService                                x
//	ServiceEntry, WorkloadEntry,  x    x    x    x    x
//	MeshConfig, Sidecar, Gateway,
//	anything else, or a full push
//	with no keys
//
// Which proxies a change reaches: a Service, DestinationRule or
// VirtualService change reaches a proxy when the object, before or after
// the change, is exported to the proxy's namespace (a Service change also
// reaches the proxies that are its endpoints, for their inbound config); an
// endpoint-only change reaches the proxies watching a cluster of a changed
// host; any other change reaches every proxy.
var pushTypes = map[model.Kind][]string{
	model.KindEndpoints:       {model.EndpointType},
	model.KindService:         {model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType},
	model.KindDestinationRule: {model.ClusterType, model.EndpointType},
	model.KindVirtualService:  {model.RouteType},
}

// scopedKinds are the kinds whose reach is decided by visibility.
var scopedKinds = map[model.Kind]bool{
	model.KindService: true, model.KindDestinationRule: true, model.KindVirtualService: true, model.KindEndpoints: true,
}

// typeAffected reports whether req can change typeURL for c's proxy.
func (c *Connection) typeAffected(typeURL string, req *model.PushRequest) bool {
	if !req.Full {
		return typeURL == model.EndpointType
	}
	if len(req.ConfigsUpdated) == 0 || c.proxy.IsGRPC() {
		return true
	}
	for k := range req.ConfigsUpdated {
		types, scoped := pushTypes[k.Kind]
		if !scoped {
			return true
		}
		for _, t := range types {
			if t == typeURL {
				return true
			}
		}
	}
	return false
}

// pushScope decides, once per push round, which connections a request reaches.
type pushScope struct {
	req  *model.PushRequest
	prev *model.PushContext
	// everyone is true when the request is not scoped.
	everyone bool
	// byNamespace memoises the visibility answer per proxy namespace.
	byNamespace map[string]bool
	// services are the hostnames of changed services (inbound check).
	services []string
}

func newPushScope(req *model.PushRequest, prev *model.PushContext) *pushScope {
	p := &pushScope{req: req, prev: prev, byNamespace: map[string]bool{}}
	if !req.Full {
		return p
	}
	if len(req.ConfigsUpdated) == 0 {
		p.everyone = true
		return p
	}
	for k := range req.ConfigsUpdated {
		if !scopedKinds[k.Kind] {
			p.everyone = true
			return p
		}
		if k.Kind == model.KindService {
			p.services = append(p.services, k.Name)
		}
	}
	return p
}

// affects reports whether the request concerns c.
func (p *pushScope) affects(c *Connection) bool {
	if !p.req.Full {
		return c.watchesEndpointsOf(p.req)
	}
	if p.everyone {
		return true
	}
	ns := c.proxy.ConfigNamespace()
	visible, ok := p.byNamespace[ns]
	if !ok {
		visible = false
		for k := range p.req.ConfigsUpdated {
			if p.req.Push.ConfigVisibleTo(k, ns) || p.prev.ConfigVisibleTo(k, ns) {
				visible = true
				break
			}
		}
		p.byNamespace[ns] = visible
	}
	if visible {
		return true
	}
	// A proxy that serves a changed service needs its inbound config.
	for _, host := range p.services {
		if serves(c.proxy, p.req.Push, host) {
			return true
		}
	}
	return false
}

// serves reports whether proxy is an endpoint of host.
func serves(proxy *model.Proxy, push *model.PushContext, host string) bool {
	for _, e := range push.Endpoints.Endpoints(host) {
		for _, ip := range proxy.IPAddresses {
			if e.Address == ip {
				return true
			}
		}
	}
	return false
}

// servesAny reports whether proxy is an endpoint of one of hosts.
func servesAny(proxy *model.Proxy, push *model.PushContext, hosts map[string]struct{}) bool {
	for h := range hosts {
		if serves(proxy, push, h) {
			return true
		}
	}
	return false
}

// watchesEndpointsOf reports whether an EDS-only req concerns c: c watches
// EDS and one of its clusters ("outbound|PORT|SUBSET|HOST") names a changed
// host. A request naming anything but endpoints concerns everyone.
func (c *Connection) watchesEndpointsOf(req *model.PushRequest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watches[model.EndpointType]
	if ws == nil {
		return false
	}
	if len(req.ConfigsUpdated) == 0 || ws.watched.Wildcard {
		return true
	}
	for k := range req.ConfigsUpdated {
		if k.Kind != model.KindEndpoints {
			return true
		}
		if _, ok := ws.hosts()[k.Name]; ok {
			return true
		}
	}
	return false
}

// hosts returns the hostnames of the watched cluster names (a name that is
// no cluster name counts as a hostname itself), computed once per
// subscription change; c.mu must be held.
func (ws *watchState) hosts() map[string]struct{} {
	if ws.hostIndex != nil {
		return ws.hostIndex
	}
	ws.hostIndex = make(map[string]struct{}, len(ws.watched.ResourceNames))
	for name := range ws.watched.ResourceNames {
		if i := strings.LastIndexByte(name, '|'); i >= 0 {
			name = name[i+1:]
		}
		ws.hostIndex[name] = struct{}{}
	}
	return ws.hostIndex
}
