package listener

import (
	"log/slog"
	"net"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// inboundPort is one port the proxy accepts inbound traffic on, forwarded
// to the cluster "inbound|PORT||".
type inboundPort struct {
	// port is the workload (target) port: the filter chain's
	// destination_port and the inbound cluster's port.
	port uint32
	// servicePort names the inbound virtual host ("inbound|http|PORT").
	servicePort uint32
	protocol    model.Protocol
	// bindToPort asks for a real listener on bind:port (a Sidecar ingress
	// listener with captureMode NONE) instead of chains of virtualInbound.
	bindToPort bool
	bind       string
}

// inboundPorts returns the inbound ports of proxy, by port: those of its
// Sidecar's ingress listeners when it has some (Istio's "ingress listener"
// path; the services the workload backs are then ignored), else the
// target ports of the service ports it backs, the first service of a port
// winning. Port 15006 and UDP ports are left out.
func inboundPorts(proxy *model.Proxy, push *model.PushContext, log *slog.Logger) []inboundPort {
	var out []inboundPort
	if scope := push.SidecarScope(proxy); scope.HasIngress() {
		for _, in := range scope.IngressListeners() {
			if in.Port == VirtualInboundPort || in.Protocol == model.ProtocolUDP {
				log.Warn("sidecar ingress port not served", "sidecar", scope.Sidecar.Namespace+"/"+scope.Sidecar.Name, "port", in.Port)
				continue
			}
			out = append(out, inboundPort{port: in.Port, servicePort: in.Port, protocol: in.Protocol,
				bindToPort: in.BindToPort, bind: in.Bind})
		}
		return out
	}
	seen := map[uint32]model.ServiceTarget{}
	for _, t := range push.ServiceTargetsFor(proxy) {
		if prev, dup := seen[t.TargetPort]; dup {
			if prev.Port.Protocol.IsHTTP() != t.Port.Protocol.IsHTTP() {
				log.Debug("inbound port served with two protocols; first wins", "port", t.TargetPort,
					"kept", prev.Service.Hostname, "dropped", t.Service.Hostname)
			}
			continue
		}
		if t.TargetPort == VirtualInboundPort || t.Port.Protocol == model.ProtocolUDP {
			continue
		}
		seen[t.TargetPort] = t
		out = append(out, inboundPort{port: t.TargetPort, servicePort: t.Port.Port, protocol: t.Port.Protocol})
	}
	return out
}

// anyTCP reports whether some port is proxied as TCP.
func anyTCP(ports []inboundPort) bool {
	for _, p := range ports {
		if !p.protocol.IsHTTP() {
			return true
		}
	}
	return false
}

// inboundListeners returns virtualInbound and the real listeners of the
// inbound ports that bind their own port, sharing one inbound security.
func inboundListeners(proxy *model.Proxy, push *model.PushContext, log *slog.Logger) (*listenerv3.Listener, []*listenerv3.Listener, error) {
	ports := inboundPorts(proxy, push, log)
	sec, err := securityFor(proxy, push, anyTCP(ports), log)
	if err != nil {
		return nil, nil, err
	}
	vi, err := virtualInbound(ports, sec)
	if err != nil {
		return nil, nil, err
	}
	var bound []*listenerv3.Listener
	for _, p := range ports {
		if !p.bindToPort {
			continue
		}
		l, err := boundInbound(proxy, p, sec)
		if err != nil {
			return nil, nil, err
		}
		bound = append(bound, l)
	}
	return vi, bound, nil
}

// boundInbound is the real listener of a captureMode NONE ingress port:
// named and bound BIND_PORT, BIND the ingress bind when it is an IP, else
// the proxy's first IP (0.0.0.0 when it reports none), with the port's
// filter chains; no original_dst, the connection is addressed to it.
func boundInbound(proxy *model.Proxy, p inboundPort, sec inboundSecurity) (*listenerv3.Listener, error) {
	bind := p.bind
	if net.ParseIP(bind) == nil {
		bind = WildcardAddress
		if len(proxy.IPAddresses) > 0 {
			bind = proxy.IPAddresses[0]
		}
	}
	chains, err := p.chains(sec)
	if err != nil {
		return nil, err
	}
	l := &listenerv3.Listener{
		Name:             Name(bind, p.port),
		Address:          cluster.SocketAddress(bind, p.port),
		TrafficDirection: corev3.TrafficDirection_INBOUND,
		FilterChains:     chains,
	}
	if usesTransportMatch(chains) {
		inspector, err := authn.TLSInspector()
		if err != nil {
			return nil, err
		}
		l.ListenerFilters = []*listenerv3.ListenerFilter{inspector}
	}
	return l, nil
}

// chains returns the filter chains of p under sec, each matching p's port
// and named 0.0.0.0_PORT, as in Istio.
func (p inboundPort) chains(sec inboundSecurity) ([]*listenerv3.FilterChain, error) {
	return sec.chains(Name(WildcardAddress, p.port), false, p.port, sec.peer.PortMode(p.port),
		func() ([]*listenerv3.Filter, error) { return p.filters(sec) })
}

// filters returns the filters of an accepting chain of p: RBAC then
// tcp_proxy to the inbound cluster, or an http_connection_manager routing
// everything to it.
func (p inboundPort) filters(sec inboundSecurity) ([]*listenerv3.Filter, error) {
	name := clustername.Build(clustername.Inbound, "", "", p.port)
	if !p.protocol.IsHTTP() {
		return sec.tcpFilters(name)
	}
	rc := &routev3.RouteConfiguration{
		Name:             name,
		ValidateClusters: wrapperspb.Bool(false),
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "inbound|http|" + strconv.FormatUint(uint64(p.servicePort), 10),
			Domains: []string{"*"},
			Routes:  []*routev3.Route{route.DefaultRoute(name)},
		}},
	}
	f, err := InlineConnectionManager("inbound_0.0.0.0_"+strconv.FormatUint(uint64(p.port), 10), rc)
	if err != nil {
		return nil, err
	}
	if f, err = sec.withRBAC(f); err != nil {
		return nil, err
	}
	return []*listenerv3.Filter{f}, nil
}
