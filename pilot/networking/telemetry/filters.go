package telemetry

import (
	"fmt"

	udpav1 "github.com/cncf/xds/go/udpa/type/v1"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	grpcstatsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/grpc_stats/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Names and type URLs of Istio's proxy filters (istio/proxy), as istiod
// sends them.
const (
	// MetadataExchangeName names both the network and the HTTP metadata
	// exchange filters.
	MetadataExchangeName = "istio.metadata_exchange"
	// StatsName names the stats filter (HTTP and network).
	StatsName = "istio.stats"
	// GRPCStatsName is Envoy's gRPC statistics filter.
	GRPCStatsName = "envoy.filters.http.grpc_stats"

	networkMXType = "type.googleapis.com/envoy.tcp.metadataexchange.config.MetadataExchange"
	httpMXType    = "type.googleapis.com/io.istio.http.peer_metadata.Config"
	// peerExchangeProtocol is the ALPN the network filter exchanges metadata under.
	peerExchangeProtocol = "istio-peer-exchange"
)

// typedStruct packs an Istio proxy config that has no Go type here as a
// udpa TypedStruct, the way istiod sends it.
func typedStruct(typeURL string, value map[string]any) (*anypb.Any, error) {
	v, err := structpb.NewStruct(value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", typeURL, err)
	}
	a, err := pack(&udpav1.TypedStruct{TypeUrl: typeURL, Value: v})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", typeURL, err)
	}
	return a, nil
}

// NetworkMetadataExchange is the network filter istiod puts first on every
// inbound filter chain: peer metadata over ALPN istio-peer-exchange, with
// workload discovery.
func NetworkMetadataExchange() (*listenerv3.Filter, error) {
	cfg, err := typedStruct(networkMXType, map[string]any{"protocol": peerExchangeProtocol, "enable_discovery": true})
	if err != nil {
		return nil, err
	}
	return &listenerv3.Filter{Name: MetadataExchangeName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}, nil
}

// ClusterMetadataExchange is the upstream network filter istiod puts on
// every outbound cluster and PassthroughCluster: the metadata exchange of
// outbound TCP (the same config as NetworkMetadataExchange).
func ClusterMetadataExchange() (*clusterv3.Filter, error) {
	cfg, err := typedStruct(networkMXType, map[string]any{"protocol": peerExchangeProtocol, "enable_discovery": true})
	if err != nil {
		return nil, err
	}
	return &clusterv3.Filter{Name: MetadataExchangeName, TypedConfig: cfg}, nil
}

// HTTPMetadataExchange is the HTTP peer-metadata filter istiod puts first
// in every connection manager: downstream discovery and propagation
// (Istio headers, then workload discovery) on the inbound side, upstream
// on the outbound side and on gateways.
func HTTPMetadataExchange(class Class) (*hcmv3.HttpFilter, error) {
	dir := "upstream"
	if class == SidecarInbound {
		dir = "downstream"
	}
	cfg, err := typedStruct(httpMXType, map[string]any{
		dir + "_discovery":   []any{map[string]any{"istio_headers": map[string]any{}}, map[string]any{"workload_discovery": map[string]any{}}},
		dir + "_propagation": []any{map[string]any{"istio_headers": map[string]any{}}},
	})
	if err != nil {
		return nil, err
	}
	return &hcmv3.HttpFilter{Name: MetadataExchangeName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}, nil
}

// GRPCStats is Envoy's gRPC stats filter as istiod configures it: filter
// state for the stats filter, no per-method stats.
func GRPCStats() (*hcmv3.HttpFilter, error) {
	cfg, err := pack(&grpcstatsv3.FilterConfig{
		EmitFilterState:        true,
		PerMethodStatSpecifier: &grpcstatsv3.FilterConfig_StatsForAllMethods{StatsForAllMethods: wrapperspb.Bool(false)},
	})
	if err != nil {
		return nil, fmt.Errorf("grpc_stats: %w", err)
	}
	return &hcmv3.HttpFilter{Name: GRPCStatsName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}, nil
}

// packHTTP and packNetwork wrap a stats config as a filter.
func packHTTP(name string, m proto.Message) (*hcmv3.HttpFilter, error) {
	cfg, err := pack(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}, nil
}

func packNetwork(name string, m proto.Message) (*listenerv3.Filter, error) {
	cfg, err := pack(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &listenerv3.Filter{Name: name, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}, nil
}

// pack is anypb.New with deterministic bytes (Struct and map fields in
// any order would make equal configs differ, defeating resource versions).
func pack(m proto.Message) (*anypb.Any, error) {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, err
	}
	return a, nil
}
