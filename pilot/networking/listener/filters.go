package listener

import (
	"fmt"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	alpnv2 "istio.io/api/envoy/config/filter/http/alpn/v2alpha1"

	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// TCPProxyFilter returns a tcp_proxy network filter to clusterName; the stat
// prefix is the cluster name, as in Istio.
func TCPProxyFilter(clusterName string) (*listenerv3.Filter, error) {
	cfg, err := anypb.New(&tcpv3.TcpProxy{
		StatPrefix:       clusterName,
		ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: clusterName},
	})
	if err != nil {
		return nil, fmt.Errorf("tcp_proxy to %s: %w", clusterName, err)
	}
	return &listenerv3.Filter{Name: wellknown.TCPProxy, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}, nil
}

// RouterFilter returns the HTTP router filter every connection manager ends with.
func RouterFilter() (*hcmv3.HttpFilter, error) {
	cfg, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, fmt.Errorf("router filter: %w", err)
	}
	return &hcmv3.HttpFilter{Name: wellknown.Router, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}, nil
}

// RouteFeatureFilters returns the fault and CORS filters, empty: they act
// only on routes whose typed_per_filter_config carries a fault or a CORS
// policy (VirtualService fault and corsPolicy). They go before the router,
// fault first, in the order istiod sends them.
func RouteFeatureFilters() ([]*hcmv3.HttpFilter, error) {
	cors, err := anypb.New(&corsv3.Cors{})
	if err != nil {
		return nil, fmt.Errorf("cors filter: %w", err)
	}
	fault, err := anypb.New(&faultv3.HTTPFault{})
	if err != nil {
		return nil, fmt.Errorf("fault filter: %w", err)
	}
	return []*hcmv3.HttpFilter{
		{Name: wellknown.Fault, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: fault}},
		{Name: wellknown.CORS, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cors}},
	}, nil
}

// RDSConnectionManager returns an http_connection_manager filter that
// fetches route configuration routeName over ADS: the outbound and gateway
// managers, which also get Istio's ALPN override (ALPNFilter).
func RDSConnectionManager(statPrefix, routeName string) (*listenerv3.Filter, error) {
	alpn, err := ALPNFilter()
	if err != nil {
		return nil, err
	}
	return connectionManager(&hcmv3.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    cluster.ADSConfigSource(),
			RouteConfigName: routeName,
		}},
	}, alpn)
}

// ALPNFilterName is Istio's ALPN override filter, an extension of Istio's
// proxy (istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig).
const ALPNFilterName = "istio.alpn"

// ALPNFilter returns istio.alpn as istiod configures it on every HTTP
// connection manager but the inbound ones: it sets the ALPN of upstream
// TLS connections by the request's protocol, so the peer's inbound chains
// tell Istio mTLS HTTP ("istio-http/1.1", "istio-h2") from TCP ("istio"),
// the plain ALPN last for upstreams outside the mesh.
func ALPNFilter() (*hcmv3.HttpFilter, error) {
	cfg, err := anypb.New(&alpnv2.FilterConfig{AlpnOverride: []*alpnv2.FilterConfig_AlpnOverride{
		{UpstreamProtocol: alpnv2.FilterConfig_HTTP10, AlpnOverride: []string{"istio-http/1.0", "istio", "http/1.0"}},
		{UpstreamProtocol: alpnv2.FilterConfig_HTTP11, AlpnOverride: []string{"istio-http/1.1", "istio", "http/1.1"}},
		{UpstreamProtocol: alpnv2.FilterConfig_HTTP2, AlpnOverride: []string{"istio-h2", "istio", "h2"}},
	}})
	if err != nil {
		return nil, fmt.Errorf("%s filter: %w", ALPNFilterName, err)
	}
	return &hcmv3.HttpFilter{Name: ALPNFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}, nil
}

// InlineConnectionManager returns an http_connection_manager filter with an
// inline route configuration.
func InlineConnectionManager(statPrefix string, rc *routev3.RouteConfiguration) (*listenerv3.Filter, error) {
	return connectionManager(&hcmv3.HttpConnectionManager{
		StatPrefix:     statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc},
	}, nil)
}

// connectionManager completes hcm with the route feature filters and the
// router, after first (when not nil).
func connectionManager(hcm *hcmv3.HttpConnectionManager, first *hcmv3.HttpFilter) (*listenerv3.Filter, error) {
	router, err := RouterFilter()
	if err != nil {
		return nil, err
	}
	features, err := RouteFeatureFilters()
	if err != nil {
		return nil, err
	}
	hcm.CodecType = hcmv3.HttpConnectionManager_AUTO
	if first != nil {
		hcm.HttpFilters = append(hcm.HttpFilters, first)
	}
	hcm.HttpFilters = append(append(hcm.HttpFilters, features...), router)
	cfg, err := anypb.New(hcm)
	if err != nil {
		return nil, fmt.Errorf("http_connection_manager %s: %w", hcm.StatPrefix, err)
	}
	return &listenerv3.Filter{Name: wellknown.HTTPConnectionManager, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}, nil
}
