package route

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
)

// Generator serves RDS. Logger may be nil (no logs).
//
// A route configuration lists every visible service on its port, so it is
// cached per (name, proxy namespace) — plus the proxy's labels when some
// VirtualService matches on sourceLabels — and dropped whenever any service
// or VirtualService changes.
//
// EnvoyFilter patches (SIDECAR_OUTBOUND) are applied to each route
// configuration before it is marshalled; the cache key names the patches.
type Generator struct {
	Logger *slog.Logger
	// EnvoyFilters receives what happens to EnvoyFilter patches.
	EnvoyFilters envoyfilter.Reporter
}

var _ model.Generator = Generator{}

// routeDeps are the dependencies of every cached route configuration.
// DestinationRules count for their consistent-hash policies.
var routeDeps = []model.ConfigKey{
	model.DependsOnAll(model.KindService), model.DependsOnAll(model.KindVirtualService),
	model.DependsOnAll(model.KindDestinationRule),
}

// Generate returns the route configuration of every name in w, sorted by name.
func (g Generator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if w == nil {
		return nil, nil
	}
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names := w.Names()
	sort.Strings(names)
	cache := push.XDSCache()
	scope := routeScope(proxy, push)
	patches := envoyfilter.For(proxy, push, g.EnvoyFilters)
	efKey := patches.KeyFor(envoyfilter.SidecarOutbound, envoyfilter.RouteKinds()...)
	out := make(model.Resources, 0, len(names))
	for _, n := range names {
		key := model.XDSCacheKey{Type: model.RouteType, Name: n, Scope: scope, EnvoyFilters: efKey}
		if res, ok := cache.Get(key); ok {
			out = append(out, res[0])
			continue
		}
		tok := cache.Token(push)
		rc := BuildRouteConfiguration(proxy, push, n, log.With("proxy", proxy.ID))
		rc = patches.RouteConfiguration(envoyfilter.SidecarOutbound, rc, envoyfilter.RouteInfoFor(n))
		r, err := resource.Marshal(n, rc)
		if err != nil {
			return nil, fmt.Errorf("rds for %s: route %s: %w", proxy.ID, n, err)
		}
		cache.Add(key, routeDeps, tok, []*discovery.Resource{r})
		out = append(out, r)
	}
	return out, nil
}

// routeScope is what, besides the route name, makes two proxies' route
// configurations differ: the namespace and the Sidecar in force (service
// and VirtualService visibility, short-name domains), the labels that
// DestinationRule workload selectors of the namespace name (hash
// policies) and, only when a VirtualService uses sourceLabels, the labels.
func routeScope(proxy *model.Proxy, push *model.PushContext) string {
	ns := proxy.ConfigNamespace() + push.SidecarScope(proxy).CacheScope() + push.DestinationRuleScope(proxy) + push.ClusterVIPScope(proxy)
	if !push.VirtualServicesUseSourceLabels() || len(proxy.Labels()) == 0 {
		return ns
	}
	var b strings.Builder
	b.WriteString(ns)
	for _, k := range slices.Sorted(maps.Keys(proxy.Labels())) {
		b.WriteString("\x00" + k + "=" + proxy.Labels()[k])
	}
	return b.String()
}
