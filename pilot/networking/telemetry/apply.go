package telemetry

import (
	"fmt"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	uuidv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/request_id/uuid/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	blackHoleCluster = "BlackHoleCluster"
	corsFilter       = "envoy.filters.http.cors"
	faultFilter      = "envoy.filters.http.fault"
	alpnFilter       = "istio.alpn"
)

// Apply puts the telemetry of class on every filter chain of l (l is
// changed; call it on a listener built for this proxy, before it is
// marshalled or shared):
//
//   - inbound chains start with the network metadata exchange filter;
//   - an http_connection_manager gets the HTTP metadata exchange filter
//     first, grpc_stats after the security filters (before CORS, fault
//     and the router), the stats filter just before the router, the
//     access logs, tracing and the UUID request ID extension, as istiod;
//   - a tcp_proxy is preceded by the network stats filter and gets the
//     access logs (but not one to BlackHoleCluster, as istiod).
func (c *Config) Apply(l *listenerv3.Listener, class Class) error {
	if c == nil || l == nil {
		return nil
	}
	chains := l.GetFilterChains()
	if l.GetDefaultFilterChain() != nil {
		chains = append(chains[:len(chains):len(chains)], l.GetDefaultFilterChain())
	}
	for _, fc := range chains {
		if err := c.applyChain(fc, class); err != nil {
			return fmt.Errorf("listener %s: %w", l.GetName(), err)
		}
	}
	return nil
}

func (c *Config) applyChain(fc *listenerv3.FilterChain, class Class) error {
	cc := &c.classes[class]
	filters := make([]*listenerv3.Filter, 0, len(fc.GetFilters())+2)
	if class == SidecarInbound && (len(fc.GetFilters()) == 0 || fc.GetFilters()[0].GetName() != MetadataExchangeName) {
		filters = append(filters, c.networkMX)
	}
	for _, f := range fc.GetFilters() {
		switch f.GetName() {
		case wellknown.HTTPConnectionManager:
			nf, err := c.applyHCM(f, cc)
			if err != nil {
				return fmt.Errorf("chain %s: %w", fc.GetName(), err)
			}
			filters = append(filters, nf)
		case wellknown.TCPProxy:
			nf, err := applyTCP(f, cc)
			if err != nil {
				return fmt.Errorf("chain %s: %w", fc.GetName(), err)
			}
			if cc.tcpStats != nil {
				filters = append(filters, cc.tcpStats)
			}
			filters = append(filters, nf)
		default:
			filters = append(filters, f)
		}
	}
	fc.Filters = filters
	return nil
}

func (c *Config) applyHCM(f *listenerv3.Filter, cc *classConfig) (*listenerv3.Filter, error) {
	hcm := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
		return nil, fmt.Errorf("http_connection_manager: %w", err)
	}
	old := hcm.GetHttpFilters()
	if len(old) > 0 && old[0].GetName() == MetadataExchangeName {
		return f, nil // already applied
	}
	// tail is where Istio's ALPN override, the route feature filters (CORS,
	// fault) and the router start.
	tail := len(old)
	for i, h := range old {
		if n := h.GetName(); n == alpnFilter || n == corsFilter || n == faultFilter || n == wellknown.Router {
			tail = i
			break
		}
	}
	out := make([]*hcmv3.HttpFilter, 0, len(old)+3)
	out = append(out, cc.httpMX)
	out = append(out, old[:tail]...)
	out = append(out, c.grpcStats)
	for _, h := range old[tail:] {
		if h.GetName() == wellknown.Router && cc.httpStats != nil {
			out = append(out, cc.httpStats)
		}
		out = append(out, h)
	}
	hcm.HttpFilters = out
	hcm.AccessLog = append(hcm.AccessLog, cc.httpLogs...)
	if cc.tracing != nil {
		hcm.Tracing = cc.tracing
	}
	uuid := &uuidv3.UuidRequestIdConfig{}
	if !cc.useRequestID {
		uuid.UseRequestIdForTraceSampling = wrapperspb.Bool(false)
	}
	ext, err := pack(uuid)
	if err != nil {
		return nil, fmt.Errorf("request id extension: %w", err)
	}
	hcm.RequestIdExtension = &hcmv3.RequestIDExtension{TypedConfig: ext}
	cfg, err := pack(hcm)
	if err != nil {
		return nil, fmt.Errorf("http_connection_manager %s: %w", hcm.GetStatPrefix(), err)
	}
	return &listenerv3.Filter{Name: f.GetName(), ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}, nil
}

func applyTCP(f *listenerv3.Filter, cc *classConfig) (*listenerv3.Filter, error) {
	if len(cc.tcpLogs) == 0 {
		return f, nil
	}
	tp := &tcpv3.TcpProxy{}
	if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
		return nil, fmt.Errorf("tcp_proxy: %w", err)
	}
	if tp.GetCluster() == blackHoleCluster || len(tp.GetAccessLog()) > 0 {
		return f, nil
	}
	tp.AccessLog = cc.tcpLogs
	cfg, err := pack(tp)
	if err != nil {
		return nil, fmt.Errorf("tcp_proxy %s: %w", tp.GetStatPrefix(), err)
	}
	return &listenerv3.Filter{Name: f.GetName(), ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}, nil
}
