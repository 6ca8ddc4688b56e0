// Package bootstrap writes the files pilot-agent hands to its clients:
// Envoy's bootstrap (envoy-rev.json, the static part of Istio's
// tools/packaging/common/envoy_bootstrap.json: ADS over the agent's XDS
// socket, SDS over the agent's SDS socket, the 15090 stats and 15021
// readiness listeners) and the gRPC xDS bootstrap proxyless gRPC apps read
// through GRPC_XDS_BOOTSTRAP.
package bootstrap

import (
	"fmt"
	"net/netip"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pilot/agent/config"
)

// Static cluster names, as in Istio's bootstrap.
const (
	XDSCluster        = "xds-grpc"
	SDSCluster        = "sds-grpc"
	PrometheusCluster = "prometheus_stats"
	AgentCluster      = "agent"
)

// Paths the static listeners route.
const (
	StatsPath = "/stats/prometheus"
	ReadyPath = "/healthz/ready"
)

const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// validator is every go-control-plane message.
type validator interface {
	proto.Message
	ValidateAll() error
}

// Envoy returns Envoy's bootstrap for cfg. It and every message packed in
// it pass ValidateAll.
func Envoy(cfg *config.Config) (*bootstrapv3.Bootstrap, error) {
	node, err := cfg.Node()
	if err != nil {
		return nil, err
	}
	localhost, wildcard := "127.0.0.1", "0.0.0.0"
	if allIPv6(cfg.InstanceIPs) {
		localhost, wildcard = "::1", "::"
	}
	h2, err := http2Options()
	if err != nil {
		return nil, err
	}
	statsListener, err := httpListener(wildcard, cfg.StatsPort, "stats", StatsPath, PrometheusCluster)
	if err != nil {
		return nil, fmt.Errorf("stats listener: %w", err)
	}
	readyListener, err := httpListener(wildcard, cfg.ReadinessPort, "agent", ReadyPath, AgentCluster)
	if err != nil {
		return nil, fmt.Errorf("readiness listener: %w", err)
	}
	accessLog, err := pack(&filev3.FileAccessLog{Path: "/dev/null"})
	if err != nil {
		return nil, fmt.Errorf("admin access log: %w", err)
	}
	runtime, err := structpb.NewStruct(map[string]any{
		"overload.global_downstream_max_connections":               "2147483647",
		"re2.max_program_size.error_level":                         "32768",
		"envoy.reloadable_features.http_reject_path_with_fragment": false,
	})
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}

	stats, err := statsConfig(cfg.ProxyConfig)
	if err != nil {
		return nil, err
	}
	family := clusterv3.Cluster_V4_ONLY
	if localhost == "::1" {
		family = clusterv3.Cluster_V6_ONLY
	}
	tracer, tracerCluster, err := tracing(cfg.ProxyConfig, node.GetCluster(), family)
	if err != nil {
		return nil, err
	}

	apiType := corev3.ApiConfigSource_DELTA_GRPC
	if !cfg.DeltaXDS {
		apiType = corev3.ApiConfigSource_GRPC
	}
	ads := func() *corev3.ConfigSource {
		return &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
			InitialFetchTimeout:   durationpb.New(0),
			ResourceApiVersion:    corev3.ApiVersion_V3,
		}
	}

	xds := pipeCluster(XDSCluster, cfg.XDSSocket, h2)
	xds.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{
		thresholds(corev3.RoutingPriority_DEFAULT), thresholds(corev3.RoutingPriority_HIGH),
	}}
	b := &bootstrapv3.Bootstrap{
		Node:        node,
		StatsConfig: stats,
		Admin: &bootstrapv3.Admin{
			AccessLog: []*accesslogv3.AccessLog{{
				Name: "envoy.access_loggers.file", ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: accessLog},
			}},
			Address: socketAddress(localhost, cfg.AdminPort),
		},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             apiType,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{
					TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: XDSCluster}},
				}},
				SetNodeOnFirstMessageOnly: true,
			},
			CdsConfig: ads(),
			LdsConfig: ads(),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Clusters: []*clusterv3.Cluster{
				xds,
				pipeCluster(SDSCluster, cfg.SDSSocket, h2),
				localCluster(PrometheusCluster, localhost, cfg.AdminPort),
				localCluster(AgentCluster, localhost, cfg.StatusPort),
			},
			Listeners: []*listenerv3.Listener{statsListener, readyListener},
		},
		Tracing: tracer,
		LayeredRuntime: &bootstrapv3.LayeredRuntime{Layers: []*bootstrapv3.RuntimeLayer{
			{Name: "global config", LayerSpecifier: &bootstrapv3.RuntimeLayer_StaticLayer{StaticLayer: runtime}},
			{Name: "admin", LayerSpecifier: &bootstrapv3.RuntimeLayer_AdminLayer_{AdminLayer: &bootstrapv3.RuntimeLayer_AdminLayer{}}},
		}},
	}
	if tracerCluster != nil {
		b.StaticResources.Clusters = append(b.StaticResources.Clusters, tracerCluster)
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("Envoy bootstrap for %s: %w", cfg.NodeID(), err)
	}
	return b, nil
}

// pack validates m and wraps it in an Any.
func pack(m validator) (*anypb.Any, error) {
	if err := m.ValidateAll(); err != nil {
		return nil, err
	}
	return anypb.New(m)
}

func allIPv6(ips []string) bool {
	if len(ips) == 0 {
		return false
	}
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err != nil || a.Unmap().Is4() {
			return false
		}
	}
	return true
}

// http2Options makes a cluster speak HTTP/2 (gRPC) to its endpoints.
func http2Options() (map[string]*anypb.Any, error) {
	opts, err := pack(&upstreamhttpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
				},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("HTTP/2 protocol options: %w", err)
	}
	return map[string]*anypb.Any{httpProtocolOptionsKey: opts}, nil
}

func thresholds(p corev3.RoutingPriority) *clusterv3.CircuitBreakers_Thresholds {
	const limit = 100000
	return &clusterv3.CircuitBreakers_Thresholds{
		Priority:           p,
		MaxConnections:     wrapperspb.UInt32(limit),
		MaxPendingRequests: wrapperspb.UInt32(limit),
		MaxRequests:        wrapperspb.UInt32(limit),
		MaxRetries:         wrapperspb.UInt32(limit),
	}
}

// pipeCluster is a static HTTP/2 cluster of one Unix socket endpoint.
func pipeCluster(name, path string, h2 map[string]*anypb.Any) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(time.Second),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		LoadAssignment: loadAssignment(name, &corev3.Address{Address: &corev3.Address_Pipe{
			Pipe: &corev3.Pipe{Path: path},
		}}),
		TypedExtensionProtocolOptions: h2,
	}
}

// localCluster is a static cluster of one loopback TCP endpoint.
func localCluster(name, host string, port int) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(250 * time.Millisecond),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		LoadAssignment:       loadAssignment(name, socketAddress(host, port)),
	}
}

func loadAssignment(name string, addr *corev3.Address) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}},
			}},
		}},
	}
}

func socketAddress(host string, port int) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}

// httpListener listens on host:port and routes prefix to cluster, as the
// 15090 and 15021 listeners of Istio's bootstrap do.
func httpListener(host string, port int, statPrefix, prefix, cluster string) (*listenerv3.Listener, error) {
	router, err := pack(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := pack(&hcmv3.HttpConnectionManager{
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "backend",
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
					}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	})
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Address: socketAddress(host, port),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
			}},
		}},
	}, nil
}
