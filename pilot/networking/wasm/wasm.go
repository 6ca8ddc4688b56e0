// Package wasm turns WasmPlugins into Envoy configuration as istiod does:
// each plugin that applies to a proxy becomes a filter in its listeners
// (HTTP plugins in every HTTP connection manager, NETWORK plugins before
// the terminal network filter) that names an ECDS resource, and the ECDS
// generator serves that resource: an envoy.config.core.v3
// TypedExtensionConfig holding the Wasm filter, whose module the agent
// fetches (oci://, http(s)://) or Envoy reads (file://).
package wasm

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	extensions "istio.io/api/extensions/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
)

// Type URLs a plugin's filter accepts over ECDS: the Wasm filter, and RBAC,
// which Istio's agent substitutes when a module cannot be fetched (allow
// all when the plugin fails open, deny all otherwise).
const (
	httpWasmType    = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	httpRBACType    = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
	networkWasmType = "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm"
	networkRBACType = "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC"
)

// Plugins are the WasmPlugins that apply to one proxy, in the order they run
// (model.WasmPlugins.For).
type Plugins []*model.WasmPlugin

// For returns the plugins that apply to proxy. Proxyless gRPC clients get
// none (they have no Wasm runtime).
func For(proxy *model.Proxy, push *model.PushContext) Plugins {
	if proxy.IsGRPC() {
		return nil
	}
	return push.WasmPlugins().For(proxy.ConfigNamespace(), proxy.Labels())
}

// Key identifies the plugins and their versions, for listener cache keys:
// proxies with the same Key get the same filters.
func (ps Plugins) Key() string { return model.WasmPluginsKey(ps) }

// selected returns the plugins of one kind (network or HTTP) whose match
// selects a listener of class on port (0: a chain without a port, which
// only plugins without port selectors reach), as Istio's traffic selectors:
// mode CLIENT is outbound and gateway traffic, SERVER inbound.
func (ps Plugins) selected(network bool, class telemetry.Class, port uint32) Plugins {
	var out Plugins
	for _, p := range ps {
		if p.IsNetwork() == network && matches(p.Spec.GetMatch(), class, port) {
			out = append(out, p)
		}
	}
	return out
}

func matches(selectors []*extensions.WasmPlugin_TrafficSelector, class telemetry.Class, port uint32) bool {
	if len(selectors) == 0 {
		return true
	}
	mode := typev1beta1.WorkloadMode_CLIENT
	if class == telemetry.SidecarInbound {
		mode = typev1beta1.WorkloadMode_SERVER
	}
	for _, s := range selectors {
		if m := s.GetMode(); m != typev1beta1.WorkloadMode_UNDEFINED && m != typev1beta1.WorkloadMode_CLIENT_AND_SERVER && m != mode {
			continue
		}
		if len(s.GetPorts()) == 0 {
			return true
		}
		for _, ps := range s.GetPorts() {
			if ps.GetNumber() != 0 && ps.GetNumber() == port {
				return true
			}
		}
	}
	return false
}

// configSource is where a plugin filter's configuration comes from: ADS,
// with no initial fetch timeout, so a listener waits for its plugins (they
// may be security filters), as istiod sets it.
func configSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
		InitialFetchTimeout:   durationpb.New(0),
	}
}

func httpFilter(p *model.WasmPlugin) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: p.ResourceName, ConfigType: &hcmv3.HttpFilter_ConfigDiscovery{
		ConfigDiscovery: &corev3.ExtensionConfigSource{ConfigSource: configSource(), TypeUrls: []string{httpWasmType, httpRBACType}},
	}}
}

func networkFilter(p *model.WasmPlugin) *listenerv3.Filter {
	return &listenerv3.Filter{Name: p.ResourceName, ConfigType: &listenerv3.Filter_ConfigDiscovery{
		ConfigDiscovery: &corev3.ExtensionConfigSource{ConfigSource: configSource(), TypeUrls: []string{networkWasmType, networkRBACType}},
	}}
}

// phaseRank places a phase's plugins among the filters Apply finds
// (filterRank): before every filter ranked higher.
func phaseRank(ph extensions.PluginPhase) int {
	switch ph {
	case extensions.PluginPhase_AUTHN:
		return 10
	case extensions.PluginPhase_AUTHZ:
		return 30
	case extensions.PluginPhase_STATS:
		return 50
	}
	return 60 // UNSPECIFIED_PHASE, and values this API version lacks
}
