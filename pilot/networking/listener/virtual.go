package listener

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	origdstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
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
// anything else passes through to InboundPassthroughCluster under the
// workload's mode: plaintext by the default chain unless STRICT (then the
// default chain rejects), Istio mTLS by a TLS chain unless DISABLE. sec is
// the proxy's inbound security (securityFor).
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
	passthrough := func() ([]*listenerv3.Filter, error) { return sec.tcpFilters(clustername.InboundPassthrough) }
	catchAll, err := sec.chains("virtualInbound-catchall-tcp", true, 0, sec.peer.Mode, passthrough)
	if err != nil {
		return nil, err
	}
	var defaultChain *listenerv3.FilterChain
	for _, fc := range catchAll {
		// The plaintext (or rejecting) chain is the default: it takes what
		// no other chain does.
		if m := fc.GetFilterChainMatch(); m.GetTransportProtocol() == "" || m.GetTransportProtocol() == authn.TransportRaw {
			fc.FilterChainMatch = nil
			defaultChain = fc
			continue
		}
		chains = append(chains, fc)
	}
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
	return &listenerv3.Listener{
		Name:               VirtualInbound,
		Address:            cluster.SocketAddress("0.0.0.0", VirtualInboundPort),
		UseOriginalDst:     wrapperspb.Bool(true),
		TrafficDirection:   corev3.TrafficDirection_INBOUND,
		ListenerFilters:    listenerFilters,
		FilterChains:       chains,
		DefaultFilterChain: defaultChain,
	}, nil
}
