package bootstrap

import (
	"fmt"
	"net"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// Tracer clusters, as in Istio's bootstrap.
const (
	ZipkinCluster  = "zipkin"
	DatadogCluster = "datadog_agent"
)

// tracing returns the bootstrap's tracer and the cluster it reports to, as
// Istio's bootstrap renders ProxyConfig.tracing: Zipkin (HTTP JSON v2 to
// /api/v2/spans, 128-bit trace IDs, Istio's default, to
// zipkin.istio-system:9411) or Datadog (service name serviceCluster). The
// connection managers istiod (or meshpilot) configures with tracing but no
// provider of their own report through it. Tracers Istio's bootstrap no
// longer renders (Lightstep, Stackdriver, OpenCensus agent) give no tracer,
// as from Istio's agent; so does no tracing.
func tracing(pc *meshconfig.ProxyConfig, serviceCluster string, family clusterv3.Cluster_DnsLookupFamily) (*tracev3.Tracing, *clusterv3.Cluster, error) {
	switch t := pc.GetTracing().GetTracer().(type) {
	case *meshconfig.Tracing_Zipkin_:
		addr, err := hostPort(t.Zipkin.GetAddress())
		if err != nil {
			return nil, nil, fmt.Errorf("proxyConfig tracing.zipkin.address: %w", err)
		}
		cfg, err := pack(&tracev3.ZipkinConfig{
			CollectorCluster:         ZipkinCluster,
			CollectorEndpoint:        "/api/v2/spans",
			CollectorEndpointVersion: tracev3.ZipkinConfig_HTTP_JSON,
			TraceId_128Bit:           true,
			SharedSpanContext:        wrapperspb.Bool(false),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("zipkin tracer: %w", err)
		}
		return &tracev3.Tracing{Http: &tracev3.Tracing_Http{Name: "envoy.tracers.zipkin",
			ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: cfg}}}, dnsCluster(ZipkinCluster, addr, family), nil
	case *meshconfig.Tracing_Datadog_:
		addr, err := hostPort(t.Datadog.GetAddress())
		if err != nil {
			return nil, nil, fmt.Errorf("proxyConfig tracing.datadog.address: %w", err)
		}
		cfg, err := pack(&tracev3.DatadogConfig{CollectorCluster: DatadogCluster, ServiceName: serviceCluster})
		if err != nil {
			return nil, nil, fmt.Errorf("datadog tracer: %w", err)
		}
		return &tracev3.Tracing{Http: &tracev3.Tracing_Http{Name: "envoy.tracers.datadog",
			ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: cfg}}}, dnsCluster(DatadogCluster, addr, family), nil
	}
	return nil, nil, nil
}

// hostPort splits "host:port" into a socket address.
func hostPort(s string) (*corev3.Address, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil || port == 0 || host == "" {
		return nil, fmt.Errorf("%q is not HOST:PORT", s)
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}, nil
}

// dnsCluster is a STRICT_DNS cluster of one address, as Istio's bootstrap
// declares its tracer clusters.
func dnsCluster(name string, addr *corev3.Address, family clusterv3.Cluster_DnsLookupFamily) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS},
		RespectDnsTtl:        true,
		DnsLookupFamily:      family,
		ConnectTimeout:       durationpb.New(time.Second),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		LoadAssignment:       loadAssignment(name, addr),
	}
}
