package grpcgen

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authz"
)

// routerFilterName is the well-known name of Envoy's terminal HTTP router filter.
const routerFilterName = "envoy.filters.http.router"

// ListenerGenerator builds client-side API listeners named "HOST:PORT" (the
// xds:/// target a gRPC channel dials) and the server-side listeners of
// xDS-enabled gRPC servers (InboundListenerPrefix + "IP:PORT").
type ListenerGenerator struct{}

// Generate returns one API listener per requested name that resolves to a
// visible service port (unknown names are omitted, which grpc-go reads as
// "does not exist"), or, for a wildcard watch, one per HTTP or gRPC port of
// every visible service. Names under InboundListenerPrefix get the
// server-side listener of an xDS-enabled gRPC server.
func (ListenerGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	out := map[string]proto.Message{}
	names, wildcard := requested(w)
	var rbac *authz.Filters
	for _, n := range names {
		host, port, ok := parseInboundName(n)
		if !ok {
			continue
		}
		if rbac == nil {
			f, err := authz.ForWorkload(push, proxy.ConfigNamespace(), proxy.Labels())
			if err != nil {
				return nil, err
			}
			if f.HTTP, err = legacyRBAC(f.HTTP, headerStyleFor(proxy)); err != nil {
				return nil, err
			}
			rbac = &f
		}
		l, err := buildInboundListener(n, host, port, rbac.HTTP)
		if err != nil {
			return nil, err
		}
		out[n] = l
	}
	for _, t := range targets(proxy, push, names, wildcard) {
		l, err := buildAPIListener(t.name)
		if err != nil {
			return nil, err
		}
		out[t.name] = l
	}
	return marshalAll(model.ListenerType, out)
}

// targets resolves listener or route names; a wildcard adds "FQDN:PORT"
// for each HTTP or gRPC port of every visible service.
func targets(proxy *model.Proxy, push *model.PushContext, names []string, wildcard bool) []target {
	var out []target
	if wildcard {
		for _, svc := range push.ServicesFor(proxy) {
			for _, p := range svc.Ports {
				if p.Protocol.IsHTTP() {
					out = append(out, target{name: hostPort(svc.Hostname, p.Port), service: svc, port: p})
				}
			}
		}
	}
	for _, n := range names {
		if t, ok := resolveTarget(proxy, push, n); ok {
			out = append(out, t)
		}
	}
	return out
}

// buildAPIListener returns a listener whose HttpConnectionManager fetches
// the route configuration of the same name over ADS.
func buildAPIListener(name string) (*listenerv3.Listener, error) {
	router, err := toAny(routerFilter())
	if err != nil {
		return nil, err
	}
	// The fault filter does nothing by itself: routes carry their faults
	// in typed_per_filter_config under the same name.
	fault, err := toAny(&faultv3.HTTPFault{})
	if err != nil {
		return nil, err
	}
	hcm := &hcmv3.HttpConnectionManager{
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		StatPrefix: name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsConfigSource(),
			RouteConfigName: name,
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: faultFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: fault}},
			{Name: routerFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}},
		},
	}
	hcmAny, err := toAny(hcm)
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name:        name,
		ApiListener: &listenerv3.ApiListener{ApiListener: hcmAny},
	}, nil
}

// routerFilter is the terminal HTTP filter every gRPC listener ends with.
func routerFilter() *routerv3.Router { return &routerv3.Router{} }

// adsConfigSource says "fetch over the same ADS stream, v3".
func adsConfigSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}
