// Package listener builds the Envoy listeners (LDS) of a sidecar.
package listener

import (
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	httpinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
	"github.com/meshpilot/meshpilot/pilot/networking/wasm"
)

// WildcardAddress is the address of outbound listeners shared by every service on a port.
const WildcardAddress = "0.0.0.0"

// Name returns Istio's outbound listener name "ADDRESS_PORT".
func Name(address string, port uint32) string {
	return address + "_" + strconv.FormatUint(uint64(port), 10)
}

// Build returns the listeners of proxy, sorted by name: virtualOutbound,
// virtualInbound, one 0.0.0.0_PORT listener per HTTP port (routes from RDS
// "PORT"), one VIP_PORT listener per TCP service port with a VIP and
// 0.0.0.0_PORT for TCP ports of services without one, unless an HTTP
// listener owns the port. A VIP that is not an IP (a CIDR) counts as none. Headless (Passthrough) services get no TCP
// listener: virtualOutbound passes their traffic through, except on TLS
// and HTTPS ports of ServiceEntries (resolution NONE). TLS and HTTPS ports
// get filter chains by SNI from VirtualService tls routes (see
// tlsRoutesFor and outboundTLS); those of services without a VIP share
// 0.0.0.0_PORT. Every listener
// but the two virtual ones has bind_to_port false, except those a Sidecar
// binds with captureMode NONE: the real inbound listeners IP_PORT of its
// ingress ports and the outbound listeners of its egress ports. A Sidecar's
// egress listeners with ports narrow which services get listeners on which
// ports (see outboundListeners). Every listener carries the proxy's
// telemetry (telemetry.Config.Apply) and WasmPlugin filters (wasm.Plugins.Apply).
func Build(proxy *model.Proxy, push *model.PushContext, log *slog.Logger) ([]*listenerv3.Listener, error) {
	tel, err := telemetry.For(proxy, push)
	if err != nil {
		return nil, err
	}
	ext := extensions{tel: tel, wasm: wasm.For(proxy, push)}
	vo, err := virtualOutbound(push.SidecarScope(proxy).AllowAny())
	if err != nil {
		return nil, err
	}
	vi, bound, err := inboundListeners(proxy, push, log)
	if err != nil {
		return nil, err
	}
	for _, l := range append([]*listenerv3.Listener{vi}, bound...) {
		if err := ext.apply(l, telemetry.SidecarInbound); err != nil {
			return nil, err
		}
	}
	if err := ext.apply(vo, telemetry.SidecarOutbound); err != nil {
		return nil, err
	}
	out := append([]*listenerv3.Listener{vo, vi}, bound...)
	for _, o := range outboundListeners(proxy, push, log) {
		l, err := o.build()
		if err != nil {
			return nil, err
		}
		if err := ext.apply(l, telemetry.SidecarOutbound); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// outboundSpec is one outbound listener to build. Its content is a function
// of these fields alone, so it can be cached under them.
type outboundSpec struct {
	name string
	addr string
	port uint32
	// host is the service of a TCP listener; "" for an HTTP listener.
	host string
	// tcp are the VirtualService tcp routes of a TCP listener; nil: all to
	// the service's cluster.
	tcp tcpRoutes
	// tls, non-nil for the listener of a TLS or HTTPS port, are its filter
	// chains: the tls routes of its services, or their own clusters; several
	// services without a VIP share one 0.0.0.0 listener by SNI.
	tls tlsRoutes
	// allowAny picks where a TLS or HTTP listener sends what no chain
	// claims: PassthroughCluster, else BlackHoleCluster.
	allowAny bool
	// bindToPort is set for the listener of a Sidecar egress port with
	// captureMode NONE: a real listener rather than one virtualOutbound
	// hands connections to.
	bindToPort bool
	// timeouts of a TCP listener's tcp_proxy, from the DestinationRule.
	timeouts tcpTimeouts
}

// tcpTimeouts are the tcp_proxy idle timeout and maximum downstream
// connection duration Istio takes from the top-level connectionPool.tcp of
// the DestinationRule a proxy sees for a TCP service (idleTimeout,
// maxConnectionDuration); zero when unset (Envoy's defaults).
type tcpTimeouts struct {
	idle, maxDuration time.Duration
}

func tcpTimeoutsFor(push *model.PushContext, proxy *model.Proxy, svc *model.Service) tcpTimeouts {
	if !push.DestinationRulesSetTCPTimeouts() {
		return tcpTimeouts{}
	}
	dr := push.DestinationRuleFor(proxy, svc)
	if dr == nil {
		return tcpTimeouts{}
	}
	rule, _ := dr.Spec.(*networking.DestinationRule)
	tcp := rule.GetTrafficPolicy().GetConnectionPool().GetTcp()
	return tcpTimeouts{idle: tcp.GetIdleTimeout().AsDuration(), maxDuration: tcp.GetMaxConnectionDuration().AsDuration()}
}

func (t tcpTimeouts) key() string {
	if t == (tcpTimeouts{}) {
		return ""
	}
	return "\x00timeouts" + t.idle.String() + "/" + t.maxDuration.String()
}

// apply sets the timeouts on tp.
func (t tcpTimeouts) apply(tp *tcpv3.TcpProxy) {
	if t.idle > 0 {
		tp.IdleTimeout = durationpb.New(t.idle)
	}
	if t.maxDuration > 0 {
		tp.MaxDownstreamConnectionDuration = durationpb.New(t.maxDuration)
	}
}

// cacheScope is what, with the name, determines the listener.
func (o outboundSpec) cacheScope() string {
	s := o.host + o.tcp.key() + o.timeouts.key()
	if o.tls != nil {
		s += "\x00tls" + o.tls.key()
	}
	if o.tls != nil || o.host == "" {
		s += "\x00" + strconv.FormatBool(o.allowAny)
	}
	if o.bindToPort {
		s += "\x00bind"
	}
	return s
}

// hasHTTP reports whether the listener has an HTTP connection manager:
// only the HTTP listener of a port (TCP and TLS ones proxy TCP).
func (o outboundSpec) hasHTTP() bool { return o.host == "" }

func (o outboundSpec) build() (*listenerv3.Listener, error) {
	var (
		l   *listenerv3.Listener
		err error
	)
	switch {
	case o.hasHTTP():
		l, err = outboundHTTP(o.name, o.addr, o.port, o.allowAny)
	case o.tls != nil:
		l, err = outboundTLS(o.name, o.addr, o.port, o.tls, o.allowAny)
	case o.tcp == nil:
		l, err = outboundTCP(o.name, o.addr, o.port, clustername.Build(clustername.Outbound, "", o.host, o.port), o.timeouts)
	default:
		var chains []*listenerv3.FilterChain
		chains, err = tcpFilterChains(o.tcp, clustername.Build(clustername.Outbound, "", o.host, o.port))
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", o.name, err)
		}
		l = outboundListener(o.name, o.addr, o.port, nil)
		l.FilterChains = chains
	}
	if err != nil {
		return nil, err
	}
	if o.bindToPort {
		// Envoy's default: bind.
		l.BindToPort = nil
	}
	return l, nil
}

// egressAddress returns the address of the outbound listeners of a port
// its Sidecar declares in an egress listener: the listener's bind, else
// 127.0.0.1 for captureMode NONE (Istio binds such listeners to
// localhost), else "" (the default: 0.0.0.0 or the service VIP).
func egressAddress(ep model.EgressPort) string {
	switch {
	case ep.Bind != "":
		return ep.Bind
	case ep.BindToPort:
		return "127.0.0.1"
	}
	return ""
}

// outboundListeners plans the outbound listeners of the services proxy sees
// (see Build), HTTP listeners first by port, then TCP listeners in service
// order, each with the tcp routes of its service's VirtualService. Under a
// Sidecar with egress listeners declaring ports, a service port gets a
// listener only when the egress listener of that port (or, for a port no
// listener declares, the catch-all one) selects the service
// (SidecarScope.SelectsOnPort), with the protocol the egress port declares;
// a declared HTTP port always gets its listener, and a declared bind or
// captureMode NONE sets the listeners' address and bind_to_port. TLS
// listeners of one name merge the chains of their services (the first
// chain of a given match wins); any other name conflict keeps the first
// service.
func outboundListeners(proxy *model.Proxy, push *model.PushContext, log *slog.Logger) []outboundSpec {
	scope := push.SidecarScope(proxy)
	services := scope.Services()
	warn := func(vs string, err error) {
		log.Warn("virtual service tcp route not applied", "virtualservice", vs, "error", err)
	}
	warnTLS := func(vs string, err error) {
		log.Warn("virtual service tls route not applied", "virtualservice", vs, "error", err)
	}
	// Without egress ports every service of the scope is selected on every
	// port: skip the per-port check (it is on the LDS cache-hit path).
	egressPorts := scope.EgressPorts()
	selected := func(svc *model.Service, port uint32) bool {
		return len(egressPorts) == 0 || scope.SelectsOnPort(svc, port)
	}
	httpPorts := map[uint32]bool{}
	for _, svc := range services {
		for _, p := range svc.Ports {
			if scope.OutboundProtocol(p).IsHTTP() && selected(svc, p.Port) {
				httpPorts[p.Port] = true
			}
		}
	}
	for _, ep := range egressPorts {
		if ep.Protocol.IsHTTP() {
			httpPorts[ep.Port] = true
		}
	}
	ports := make([]uint32, 0, len(httpPorts))
	for p := range httpPorts {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	out := make([]outboundSpec, 0, len(ports)+len(services))
	for _, p := range ports {
		addr := WildcardAddress
		ep, declared := scope.EgressPort(p)
		if a := egressAddress(ep); declared && a != "" {
			addr = a
		}
		out = append(out, outboundSpec{name: Name(addr, p), addr: addr, port: p, allowAny: scope.AllowAny(),
			bindToPort: declared && ep.BindToPort})
	}

	clusterID := proxy.Metadata.ClusterID
	taken := map[string]string{}
	// tlsAt indexes the TLS listeners of out by name, for merging.
	tlsAt := map[string]int{}
	for _, svc := range services {
		for _, p := range svc.Ports {
			proto := scope.OutboundProtocol(p)
			tls := isTLS(proto)
			if !proto.IsTCP() || !selected(svc, p.Port) {
				continue
			}
			// Headless services' traffic passes through virtualOutbound;
			// TLS ports of ServiceEntries without resolution get SNI
			// chains on the 0.0.0.0 listener, as in Istio.
			if svc.Resolution == model.Passthrough && (!tls || svc.Registry != model.RegistryServiceEntry) {
				continue
			}
			ep, declared := scope.EgressPort(p.Port)
			addr := WildcardAddress
			switch {
			case declared && egressAddress(ep) != "":
				addr = egressAddress(ep)
			case svc.HasAddressFor(clusterID) && net.ParseIP(svc.AddressFor(clusterID)) != nil:
				// The address of the proxy's cluster (a service of several clusters has one in each).
				addr = svc.AddressFor(clusterID)
			case len(push.AutoVIPsFor(proxy, svc)) > 0:
				// A ServiceEntry without addresses, to a proxy whose agent
				// resolves it to its auto-allocated VIP (as Istio).
				addr = push.AutoVIPsFor(proxy, svc)[0]
			case httpPorts[p.Port]:
				log.Debug("tcp port owned by an http listener; skipped", "service", svc.Hostname, "port", p.Port)
				continue
			}
			name := Name(addr, p.Port)
			if i, ok := tlsAt[name]; ok && tls {
				out[i].tls = out[i].tls.merge(tlsRoutesFor(proxy, push, svc, p.Port, addr, warnTLS))
				continue
			}
			if owner, dup := taken[name]; dup {
				log.Debug("listener conflict; first service wins", "listener", name, "kept", owner, "dropped", svc.Hostname)
				continue
			}
			taken[name] = svc.Hostname
			if tls {
				tlsAt[name] = len(out)
				out = append(out, outboundSpec{name: name, addr: addr, port: p.Port, host: svc.Hostname,
					tls: tlsRoutesFor(proxy, push, svc, p.Port, addr, warnTLS), allowAny: scope.AllowAny(),
					bindToPort: declared && ep.BindToPort})
				continue
			}
			out = append(out, outboundSpec{name: name, addr: addr, port: p.Port, host: svc.Hostname,
				tcp: tcpRoutesFor(proxy, push, svc, p.Port, warn), bindToPort: declared && ep.BindToPort,
				timeouts: tcpTimeoutsFor(push, proxy, svc)})
		}
	}
	return out
}

// isTLS reports whether a port carries TLS the proxy routes by SNI.
func isTLS(p model.Protocol) bool { return p == model.ProtocolTLS || p == model.ProtocolHTTPS }

// outboundHTTP is the listener of an HTTP port, as istiod builds it: the
// http_inspector listener filter tells plaintext HTTP/1.1 and h2c, which
// the connection manager (routes of configuration PORT) takes; anything
// else (TLS, other protocols) goes by the default chain to
// PassthroughCluster, or BlackHoleCluster when only registry services may
// be reached (the chain's name is the same either way, as for TLS
// listeners).
func outboundHTTP(name, addr string, port uint32, allowAny bool) (*listenerv3.Listener, error) {
	hcm, err := RDSConnectionManager("outbound_"+name, strconv.FormatUint(uint64(port), 10))
	if err != nil {
		return nil, err
	}
	inspector, err := anypb.New(&httpinspectorv3.HttpInspector{})
	if err != nil {
		return nil, fmt.Errorf("listener %s: http_inspector: %w", name, err)
	}
	target := clustername.BlackHole
	if allowAny {
		target = clustername.Passthrough
	}
	other, err := TCPProxyFilter(target)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", name, err)
	}
	l := outboundListener(name, addr, port, hcm)
	l.FilterChains[0].FilterChainMatch = &listenerv3.FilterChainMatch{
		TransportProtocol:    authn.TransportRaw,
		ApplicationProtocols: []string{"http/1.1", "h2c"},
	}
	l.ListenerFilters = []*listenerv3.ListenerFilter{{
		Name:       wellknown.HTTPInspector,
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: inspector},
	}}
	l.DefaultFilterChain = &listenerv3.FilterChain{
		Name:             PassthroughFilterChain,
		FilterChainMatch: &listenerv3.FilterChainMatch{},
		Filters:          []*listenerv3.Filter{other},
	}
	return l, nil
}

// outboundTCP is a listener with one tcp_proxy to clusterName (Istio's
// single-destination case, which also carries the rule's tcp timeouts).
func outboundTCP(name, addr string, port uint32, clusterName string, t tcpTimeouts) (*listenerv3.Listener, error) {
	tp := &tcpv3.TcpProxy{StatPrefix: clusterName, ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: clusterName}}
	t.apply(tp)
	cfg, err := anypb.New(tp)
	if err != nil {
		return nil, fmt.Errorf("listener %s: tcp_proxy to %s: %w", name, clusterName, err)
	}
	return outboundListener(name, addr, port, &listenerv3.Filter{Name: wellknown.TCPProxy, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}), nil
}

func outboundListener(name, addr string, port uint32, f *listenerv3.Filter) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:             name,
		Address:          cluster.SocketAddress(addr, port),
		BindToPort:       wrapperspb.Bool(false),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		FilterChains:     []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{f}}},
	}
}
