package cluster

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	proxyprotocolv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
)

// TransportSocketProxyProtocol is Envoy's upstream PROXY protocol transport
// socket, which wraps another transport socket.
const TransportSocketProxyProtocol = "envoy.transport_sockets.upstream_proxy_protocol"

// applyProxyProtocol makes the cluster send a PROXY protocol header (version
// V1 or V2 of pp) before anything else, as Istio does: the cluster's
// transport socket, or each of its transport_socket_matches (auto-mTLS),
// is wrapped in the upstream_proxy_protocol socket; a cluster with neither
// gets the wrapper around a plaintext (raw_buffer) socket. nil pp: nothing.
func applyProxyProtocol(c *clusterv3.Cluster, pp *networking.TrafficPolicy_ProxyProtocol) error {
	if pp == nil {
		return nil
	}
	version := corev3.ProxyProtocolConfig_V1
	if pp.GetVersion() == networking.TrafficPolicy_ProxyProtocol_V2 {
		version = corev3.ProxyProtocolConfig_V2
	}
	wrap := func(inner *corev3.TransportSocket) (*corev3.TransportSocket, error) {
		a, err := anypb.New(&proxyprotocolv3.ProxyProtocolUpstreamTransport{
			Config:          &corev3.ProxyProtocolConfig{Version: version},
			TransportSocket: inner,
		})
		if err != nil {
			return nil, fmt.Errorf("cluster %s: proxyProtocol transport socket: %w", c.Name, err)
		}
		return &corev3.TransportSocket{Name: TransportSocketProxyProtocol, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}, nil
	}
	if c.TransportSocket == nil && len(c.TransportSocketMatches) == 0 {
		raw, err := anypb.New(&rawbufferv3.RawBuffer{})
		if err != nil {
			return fmt.Errorf("cluster %s: raw_buffer transport socket: %w", c.Name, err)
		}
		c.TransportSocket = &corev3.TransportSocket{Name: TransportSocketRawBuffer, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: raw}}
	}
	if c.TransportSocket != nil {
		ts, err := wrap(c.TransportSocket)
		if err != nil {
			return err
		}
		c.TransportSocket = ts
	}
	for _, m := range c.TransportSocketMatches {
		ts, err := wrap(m.TransportSocket)
		if err != nil {
			return err
		}
		m.TransportSocket = ts
	}
	return nil
}
