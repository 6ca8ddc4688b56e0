package listener

import (
	"fmt"
	"log/slog"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	origdstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
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
	target := cluster.BlackHole
	if allowAny {
		target = cluster.Passthrough
	}
	catchAll, err := TCPProxyFilter(target)
	if err != nil {
		return nil, err
	}
	loop, err := TCPProxyFilter(cluster.BlackHole)
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
// target port of its own service ports (HTTP or TCP, to inbound|PORT||)
// the filter chains its PeerAuthentication mode asks for (see
// authn.Variants), each with the RBAC filters of the AuthorizationPolicies
// that select it; anything else passes through to
// InboundPassthroughCluster under the workload's mode: plaintext by the
// default chain unless STRICT (then the default chain rejects), Istio mTLS
// by a TLS chain unless DISABLE.
func virtualInbound(proxy *model.Proxy, push *model.PushContext, log *slog.Logger) (*listenerv3.Listener, error) {
	targets := push.ServiceTargetsFor(proxy)
	origDst, err := anypb.New(&origdstv3.OriginalDst{})
	if err != nil {
		return nil, fmt.Errorf("listener %s: original_dst: %w", VirtualInbound, err)
	}
	loop, err := TCPProxyFilter(cluster.BlackHole)
	if err != nil {
		return nil, err
	}
	hasTCP := false
	for _, t := range targets {
		hasTCP = hasTCP || !t.Port.Protocol.IsHTTP()
	}
	sec, err := securityFor(proxy, push, hasTCP, log)
	if err != nil {
		return nil, err
	}
	chains := []*listenerv3.FilterChain{{
		Name:             "virtualInbound-blackhole",
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(VirtualInboundPort)},
		Filters:          []*listenerv3.Filter{loop},
	}}
	seen := map[uint32]model.ServiceTarget{}
	for _, t := range targets {
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
		fcs, err := sec.chains(cluster.BuildName(cluster.Inbound, "", "", t.TargetPort), t.TargetPort, sec.peer.PortMode(t.TargetPort),
			func() ([]*listenerv3.Filter, error) { return inboundFilters(t, sec) })
		if err != nil {
			return nil, err
		}
		chains = append(chains, fcs...)
	}
	passthrough := func() ([]*listenerv3.Filter, error) { return sec.tcpFilters(cluster.InboundPassthrough) }
	catchAll, err := sec.chains("virtualInbound-catchall-tcp", 0, sec.peer.Mode, passthrough)
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

// inboundFilters returns the filters of an accepting chain of target t.
func inboundFilters(t model.ServiceTarget, sec inboundSecurity) ([]*listenerv3.Filter, error) {
	name := cluster.BuildName(cluster.Inbound, "", "", t.TargetPort)
	if !t.Port.Protocol.IsHTTP() {
		return sec.tcpFilters(name)
	}
	rc := &routev3.RouteConfiguration{
		Name:             name,
		ValidateClusters: wrapperspb.Bool(false),
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "inbound|http|" + strconv.FormatUint(uint64(t.Port.Port), 10),
			Domains: []string{"*"},
			Routes:  []*routev3.Route{route.DefaultRoute(name)},
		}},
	}
	f, err := InlineConnectionManager("inbound_0.0.0.0_"+strconv.FormatUint(uint64(t.TargetPort), 10), rc)
	if err != nil {
		return nil, err
	}
	if f, err = sec.withRBAC(f); err != nil {
		return nil, err
	}
	return []*listenerv3.Filter{f}, nil
}
