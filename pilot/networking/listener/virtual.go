package listener

import (
	"fmt"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httpinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	origdstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// Names and ports of the two listeners iptables redirects to.
const (
	VirtualOutbound     = "virtualOutbound"
	VirtualInbound      = "virtualInbound"
	VirtualOutboundPort = 15001
	VirtualInboundPort  = 15006
)

// virtualOutbound accepts every redirected outbound connection and hands it
// to the listener of its original destination; what no listener claims goes
// to PassthroughCluster (ALLOW_ANY) or BlackHoleCluster (REGISTRY_ONLY).
func virtualOutbound(allowAny bool) (*listenerv3.Listener, error) {
	target := clustername.BlackHole
	if allowAny {
		target = clustername.Passthrough
	}
	catchAll, err := TCPProxyFilter(target)
	if err != nil {
		return nil, err
	}
	loop, err := TCPProxyFilter(clustername.BlackHole)
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name:             VirtualOutbound,
		Address:          cluster.SocketAddress("0.0.0.0", VirtualOutboundPort),
		UseOriginalDst:   wrapperspb.Bool(true),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		FilterChains: []*listenerv3.FilterChain{
			{
				// Connections addressed to 15001 itself would loop.
				Name:             "virtualOutbound-blackhole",
				FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(VirtualOutboundPort)},
				Filters:          []*listenerv3.Filter{loop},
			},
			{Name: "virtualOutbound-catchall-tcp", Filters: []*listenerv3.Filter{catchAll}},
		},
	}, nil
}

// virtualInbound accepts every redirected inbound connection of proxy: per
// inbound port (inboundPorts: its own service target ports, or its
// Sidecar's ingress listeners not bound to a port of their own) the filter
// chains its PeerAuthentication mode asks for (see authn.Variants), each
// with the RBAC filters of the AuthorizationPolicies that select it;
// anything else passes through to InboundPassthroughCluster by istiod's
// chains for the workload's mode (passthroughChains). sec is the proxy's
// inbound security (securityFor).
func virtualInbound(ports []inboundPort, sec inboundSecurity) (*listenerv3.Listener, error) {
	origDst, err := anypb.New(&origdstv3.OriginalDst{})
	if err != nil {
		return nil, fmt.Errorf("listener %s: original_dst: %w", VirtualInbound, err)
	}
	loop, err := TCPProxyFilter(clustername.BlackHole)
	if err != nil {
		return nil, err
	}
	chains := []*listenerv3.FilterChain{{
		Name:             "virtualInbound-blackhole",
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(VirtualInboundPort)},
		Filters:          []*listenerv3.Filter{loop},
	}}
	for _, p := range ports {
		if p.bindToPort {
			continue
		}
		fcs, err := p.chains(sec)
		if err != nil {
			return nil, err
		}
		chains = append(chains, fcs...)
	}
	pass, err := passthroughChains(sec)
	if err != nil {
		return nil, err
	}
	chains = append(chains, pass...)
	listenerFilters := []*listenerv3.ListenerFilter{{
		Name:       wellknown.OriginalDestination,
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: origDst},
	}}
	if usesTransportMatch(chains) {
		inspector, err := authn.TLSInspector()
		if err != nil {
			return nil, err
		}
		listenerFilters = append(listenerFilters, inspector)
	}
	if usesHTTPMatch(chains) {
		inspector, err := anypb.New(&httpinspectorv3.HttpInspector{})
		if err != nil {
			return nil, fmt.Errorf("listener %s: http_inspector: %w", VirtualInbound, err)
		}
		listenerFilters = append(listenerFilters, &listenerv3.ListenerFilter{
			Name:       wellknown.HTTPInspector,
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: inspector},
		})
	}
	return &listenerv3.Listener{
		Name:             VirtualInbound,
		Address:          cluster.SocketAddress("0.0.0.0", VirtualInboundPort),
		UseOriginalDst:   wrapperspb.Bool(true),
		TrafficDirection: corev3.TrafficDirection_INBOUND,
		ListenerFilters:  listenerFilters,
		FilterChains:     chains,
	}, nil
}

// Application protocols the passthrough chains match: Istio's mTLS ALPNs
// for HTTP and for TCP (set by the client sidecar's istio.alpn filter and
// cluster), and http_inspector's for plaintext HTTP.
var (
	mtlsHTTPALPNs      = []string{"istio-http/1.0", "istio-http/1.1", "istio-h2"}
	mtlsTCPALPNs       = []string{"istio-peer-exchange", "istio"}
	plaintextHTTPALPNs = []string{"http/1.1", "h2c"}
)

// passthroughChain is one chain of the traffic no port chain claims.
type passthroughChain struct {
	http      bool // an HTTP connection manager, else tcp_proxy
	transport string
	alpn      []string
	mtls      bool // terminates Istio mTLS
}

// passthroughLayout lists the passthrough chains of a mode, in istiod's
// order and with its matches:
//
//	PERMISSIVE  HTTP: mTLS (Istio HTTP ALPNs), plaintext HTTP; TCP: mTLS
//	            (Istio TCP ALPNs), plaintext, other TLS (passed as is)
//	STRICT      HTTP: mTLS (Istio HTTP ALPNs); TCP: mTLS (any other TLS);
//	            plaintext matches no chain and is closed
//	DISABLE     HTTP: plaintext HTTP; TCP: anything else
//
// HTTP chains ("virtualInbound-catchall-http") route every request to
// InboundPassthroughCluster through a connection manager, so HTTP
// authorization rules and telemetry apply per request; TCP chains
// ("virtualInbound") proxy the connection.
func passthroughLayout(m authn.Mode) []passthroughChain {
	switch m {
	case authn.ModeStrict:
		return []passthroughChain{
			{http: true, transport: authn.TransportTLS, alpn: mtlsHTTPALPNs, mtls: true},
			{transport: authn.TransportTLS, mtls: true},
		}
	case authn.ModeDisable:
		return []passthroughChain{
			{http: true, transport: authn.TransportRaw, alpn: plaintextHTTPALPNs},
			{},
		}
	}
	return []passthroughChain{
		{http: true, transport: authn.TransportTLS, alpn: mtlsHTTPALPNs, mtls: true},
		{http: true, transport: authn.TransportRaw, alpn: plaintextHTTPALPNs},
		{transport: authn.TransportTLS, alpn: mtlsTCPALPNs, mtls: true},
		{transport: authn.TransportRaw},
		{transport: authn.TransportTLS},
	}
}

// passthroughChains builds passthroughLayout for the workload's mode, with
// its authorization filters (HTTP ones on the HTTP chains, network ones on
// the TCP chains).
func passthroughChains(sec inboundSecurity) ([]*listenerv3.FilterChain, error) {
	var out []*listenerv3.FilterChain
	for _, c := range passthroughLayout(sec.peer.Mode) {
		fc := &listenerv3.FilterChain{Name: VirtualInbound}
		if c.transport != "" || len(c.alpn) > 0 {
			fc.FilterChainMatch = &listenerv3.FilterChainMatch{TransportProtocol: c.transport, ApplicationProtocols: c.alpn}
		}
		if c.mtls {
			fc.TransportSocket = sec.tls
		}
		var err error
		if c.http {
			fc.Name = "virtualInbound-catchall-http"
			fc.Filters, err = passthroughHTTP(sec)
		} else {
			fc.Filters, err = sec.tcpFilters(clustername.InboundPassthrough)
		}
		if err != nil {
			return nil, fmt.Errorf("listener %s chain %s: %w", VirtualInbound, fc.Name, err)
		}
		out = append(out, fc)
	}
	return out, nil
}

// passthroughHTTP is the connection manager of the HTTP passthrough
// chains: every request to InboundPassthroughCluster (virtual host
// "inbound|http|0", as istiod names it), after the authorization filters.
func passthroughHTTP(sec inboundSecurity) ([]*listenerv3.Filter, error) {
	name := clustername.InboundPassthrough
	rc := &routev3.RouteConfiguration{
		Name:             name,
		ValidateClusters: wrapperspb.Bool(false),
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "inbound|http|0",
			Domains: []string{"*"},
			Routes:  []*routev3.Route{route.DefaultRoute(name)},
		}},
	}
	f, err := InlineConnectionManager(name, rc)
	if err != nil {
		return nil, err
	}
	if f, err = sec.withRBAC(f); err != nil {
		return nil, err
	}
	return []*listenerv3.Filter{f}, nil
}

// usesHTTPMatch reports whether some chain matches plaintext HTTP by
// application protocol, which needs the HTTP inspector.
func usesHTTPMatch(chains []*listenerv3.FilterChain) bool {
	for _, fc := range chains {
		if slices.Contains(fc.GetFilterChainMatch().GetApplicationProtocols(), "http/1.1") {
			return true
		}
	}
	return false
}
