package gateway

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
	"github.com/meshpilot/meshpilot/pilot/networking/resource"
	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
	"github.com/meshpilot/meshpilot/pilot/networking/wasm"
)

// ListenerGenerator serves LDS to router proxies (BuildListeners). Logger
// may be nil (no logs).
//
// A router's listeners and route configurations are functions of its
// namespace and labels (which Gateways select it, tcp and HTTP
// sourceLabels) and of the push's Gateways, VirtualServices and services
// (and DestinationRules for routes). They are cached in the push's
// model.XDSCache under (namespace, labels), so the pods of one gateway
// Deployment share one entry, and dropped when any object of those kinds
// changes (a new object may bind to the gateway, so no finer dependency is
// safe); the listeners of a router with AUTO_PASSTHROUGH servers also
// depend on DestinationRules (their subsets are SNI names). Listeners name credentials by SDS resource name only, so a Secret
// change leaves them cached and pushes SDS alone. Listeners also carry the
// router's telemetry (pilot/networking/telemetry): their key adds
// telemetry.Key (the applied Telemetry objects and the span tags, which
// include the cluster and mesh IDs) and they depend on Telemetry objects;
// and its WasmPlugin filters (pilot/networking/wasm), keyed and depending alike.
//
// EnvoyFilter patches (GATEWAY context) are applied after the listeners
// are built; the cache key names the patches.
type ListenerGenerator struct {
	Logger *slog.Logger
	// EnvoyFilters receives what happens to EnvoyFilter patches.
	EnvoyFilters envoyfilter.Reporter
}

// RouteGenerator serves RDS to router proxies (BuildRouteConfiguration),
// cached as ListenerGenerator says. Logger may be nil (no logs).
type RouteGenerator struct {
	Logger *slog.Logger
	// EnvoyFilters receives what happens to EnvoyFilter patches.
	EnvoyFilters envoyfilter.Reporter
}

var (
	_ model.Generator = ListenerGenerator{}
	_ model.Generator = RouteGenerator{}
)

func logger(l *slog.Logger, proxy *model.Proxy) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.With("proxy", proxy.ID)
}

// listenerDeps are the dependencies of the cached gateway listeners.
func listenerDeps() []model.ConfigKey {
	return []model.ConfigKey{
		model.DependsOnAll(model.KindGateway), model.DependsOnAll(model.KindVirtualService),
		model.DependsOnAll(model.KindService), model.DependsOnAll(model.KindRequestAuthentication),
		model.DependsOnAll(model.KindAuthorizationPolicy), model.DependsOnAll(model.KindTelemetry),
		model.DependsOnAll(model.KindWasmPlugin),
	}
}

// routeDeps are the dependencies of the cached gateway routes.
func routeDeps() []model.ConfigKey {
	return append(listenerDeps(), model.DependsOnAll(model.KindDestinationRule))
}

// listenersCacheName is the cache entry name of a router's whole LDS
// answer (all its listeners); it cannot clash with a listener name.
const listenersCacheName = "gateway-listeners"

// cacheScope is what, besides the resource name, makes two routers'
// gateway resources differ: "router", the namespace and the sorted labels.
// Pods of one gateway Deployment have the same scope.
func cacheScope(proxy *model.Proxy) string {
	var b strings.Builder
	b.WriteString("router\x00" + proxy.ConfigNamespace())
	labels := proxy.Labels()
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString("\x00" + k + "=" + labels[k])
	}
	return b.String()
}

// Generate returns the gateway listeners of proxy (LDS is a wildcard subscription).
func (g ListenerGenerator) Generate(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	cache := push.XDSCache()
	patches := envoyfilter.For(proxy, push, g.EnvoyFilters)
	// Telemetry adds the proxy's cluster and mesh IDs (span tags) to what
	// the scope says.
	key := model.XDSCacheKey{Type: model.ListenerType, Name: listenersCacheName,
		Scope:        cacheScope(proxy) + "\x00telemetry" + telemetry.Key(proxy, push) + "\x00wasm" + wasm.For(proxy, push).Key(),
		EnvoyFilters: patches.KeyFor(envoyfilter.Gateway, envoyfilter.ListenerKinds()...)}
	if res, ok := cache.Get(key); ok {
		return slices.Clone(res), nil
	}
	tok := cache.Token(push)
	ls := patches.Listeners(envoyfilter.Gateway, BuildListeners(proxy, push, logger(g.Logger, proxy)))
	out := make(model.Resources, 0, len(ls))
	for _, l := range ls {
		r, err := resource.Marshal(l.Name, l)
		if err != nil {
			return nil, fmt.Errorf("lds for %s: listener %s: %w", proxy.ID, l.Name, err)
		}
		out = append(out, r)
	}
	deps := listenerDeps()
	if len(push.AutoPassthroughServers(proxy)) > 0 {
		// AUTO_PASSTHROUGH chains list the DestinationRules' subsets.
		deps = append(deps, model.DependsOnAll(model.KindDestinationRule))
	}
	cache.Add(key, deps, tok, slices.Clip(out))
	return slices.Clone(out), nil
}

// Generate returns the route configuration of every name in w, sorted by name.
func (g RouteGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if w == nil {
		return nil, nil
	}
	log := logger(g.Logger, proxy)
	names := w.Names()
	sort.Strings(names)
	cache := push.XDSCache()
	scope := cacheScope(proxy)
	patches := envoyfilter.For(proxy, push, g.EnvoyFilters)
	efKey := patches.KeyFor(envoyfilter.Gateway, envoyfilter.RouteKinds()...)
	out := make(model.Resources, 0, len(names))
	for _, n := range names {
		key := model.XDSCacheKey{Type: model.RouteType, Name: n, Scope: scope, EnvoyFilters: efKey}
		if res, ok := cache.Get(key); ok {
			out = append(out, res[0])
			continue
		}
		tok := cache.Token(push)
		rc := patches.RouteConfiguration(envoyfilter.Gateway, BuildRouteConfiguration(proxy, push, n, log), envoyfilter.RouteInfoFor(n))
		r, err := resource.Marshal(n, rc)
		if err != nil {
			return nil, fmt.Errorf("rds for %s: route %s: %w", proxy.ID, n, err)
		}
		cache.Add(key, routeDeps(), tok, []*discovery.Resource{r})
		out = append(out, r)
	}
	return out, nil
}
