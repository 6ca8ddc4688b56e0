package grpcgen

import (
	"net"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// InboundListenerPrefix starts the listener names xDS-enabled gRPC servers
// ask for: Istio's agent sets grpc-go's server_listener_resource_name_template
// to this prefix plus "%s", the server's listening address ("0.0.0.0:8080").
const InboundListenerPrefix = "xds.istio.io/grpc/lds/inbound/"

// hcmFilterName is the well-known name of the HTTP connection manager network filter.
const hcmFilterName = "envoy.filters.network.http_connection_manager"

// parseInboundName returns the address and port of an inbound listener name.
func parseInboundName(name string) (host string, port uint32, ok bool) {
	addr, found := strings.CutPrefix(name, InboundListenerPrefix)
	if !found {
		return "", 0, false
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) == nil {
		return "", 0, false
	}
	n, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || n == 0 {
		return "", 0, false
	}
	return host, uint32(n), true
}

// buildInboundListener returns the server-side listener of an xDS-enabled
// gRPC server: its address, and a default filter chain whose inline route
// configuration accepts every RPC (non-forwarding action), after the RBAC
// filters of the AuthorizationPolicies that select the server's workload
// (authz.Filters.HTTP; grpc-go enforces ALLOW and DENY and skips LOG). It
// carries no TLS: servers fall back to their own credentials.
func buildInboundListener(name, host string, port uint32, rbac []*hcmv3.HttpFilter) (*listenerv3.Listener, error) {
	router, err := toAny(routerFilter())
	if err != nil {
		return nil, err
	}
	portStr := itoa(port)
	hcm := &hcmv3.HttpConnectionManager{
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		StatPrefix: "inbound_" + portStr,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "inbound|" + portStr,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "inbound|http|" + portStr,
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: append(append([]*hcmv3.HttpFilter(nil), rbac...), &hcmv3.HttpFilter{
			Name:       routerFilterName,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}),
	}
	hcmAny, err := toAny(hcm)
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name:    name,
		Address: socketAddress(host, port),
		DefaultFilterChain: &listenerv3.FilterChain{
			Name: "inbound|" + portStr,
			Filters: []*listenerv3.Filter{{
				Name:       hcmFilterName,
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcmAny},
			}},
		},
		TrafficDirection: corev3.TrafficDirection_INBOUND,
	}, nil
}
