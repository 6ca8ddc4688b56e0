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

// virtualInbound accepts every redirected inbound connection: one filter
// chain per target port of the proxy's own service ports (HTTP or TCP, to
// inbound|PORT||), anything else passes through to InboundPassthroughCluster.
func virtualInbound(targets []model.ServiceTarget, log *slog.Logger) (*listenerv3.Listener, error) {
	origDst, err := anypb.New(&origdstv3.OriginalDst{})
	if err != nil {
		return nil, fmt.Errorf("listener %s: original_dst: %w", VirtualInbound, err)
	}
	loop, err := TCPProxyFilter(cluster.BlackHole)
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
		fc, err := inboundChain(t)
		if err != nil {
			return nil, err
		}
		chains = append(chains, fc)
	}
	passthrough, err := TCPProxyFilter(cluster.InboundPassthrough)
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name:             VirtualInbound,
		Address:          cluster.SocketAddress("0.0.0.0", VirtualInboundPort),
		UseOriginalDst:   wrapperspb.Bool(true),
		TrafficDirection: corev3.TrafficDirection_INBOUND,
		ListenerFilters: []*listenerv3.ListenerFilter{{
			Name:       wellknown.OriginalDestination,
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: origDst},
		}},
		FilterChains:       chains,
		DefaultFilterChain: &listenerv3.FilterChain{Name: "virtualInbound-catchall-tcp", Filters: []*listenerv3.Filter{passthrough}},
	}, nil
}

func inboundChain(t model.ServiceTarget) (*listenerv3.FilterChain, error) {
	name := cluster.BuildName(cluster.Inbound, "", "", t.TargetPort)
	fc := &listenerv3.FilterChain{
		Name:             name,
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(t.TargetPort)},
	}
	var f *listenerv3.Filter
	var err error
	if t.Port.Protocol.IsHTTP() {
		rc := &routev3.RouteConfiguration{
			Name:             name,
			ValidateClusters: wrapperspb.Bool(false),
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "inbound|http|" + strconv.FormatUint(uint64(t.Port.Port), 10),
				Domains: []string{"*"},
				Routes:  []*routev3.Route{route.DefaultRoute(name)},
			}},
		}
		f, err = InlineConnectionManager("inbound_0.0.0.0_"+strconv.FormatUint(uint64(t.TargetPort), 10), rc)
	} else {
		f, err = TCPProxyFilter(name)
	}
	if err != nil {
		return nil, fmt.Errorf("listener %s chain %s: %w", VirtualInbound, name, err)
	}
	fc.Filters = []*listenerv3.Filter{f}
	return fc, nil
}
