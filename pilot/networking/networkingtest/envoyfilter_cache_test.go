package networkingtest_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// scaleEnvoyFilter is an EnvoyFilter of ns0 selecting app=svc-0: a Lua
// filter named luaName before every router, a cluster MERGE on svc-2's
// clusters and a route MERGE on port 8080.
func scaleEnvoyFilter(t testing.TB, luaName, version string) model.Config {
	t.Helper()
	c := nt.EnvoyFilter(t, "ns0", "lua", `
workloadSelector: {labels: {app: svc-0}}
configPatches:
- applyTo: HTTP_FILTER
  match:
    listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}
  patch:
    operation: INSERT_BEFORE
    value: {name: `+luaName+`, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua}}
- applyTo: CLUSTER
  match: {context: SIDECAR_OUTBOUND, cluster: {service: svc-2.ns2.svc.cluster.local}}
  patch: {operation: MERGE, value: {connect_timeout: 1s}}
- applyTo: ROUTE_CONFIGURATION
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {portNumber: 8080}}
  patch: {operation: MERGE, value: {request_headers_to_remove: [x-internal]}}
`)
	c.ResourceVersion, c.CreationTimestamp = version, time.Unix(0, 0)
	return c
}

// countingCache is an XDSCache that counts hits and misses.
func countingCache(hits, misses *atomic.Int64) *model.XDSCache {
	return model.NewXDSCache(model.XDSCacheOptions{OnRead: func(hit bool) {
		if hit {
			hits.Add(1)
		} else {
			misses.Add(1)
		}
	}})
}

func luaListeners(t *testing.T, proxy *model.Proxy, push *model.PushContext, lua string) (with, without int) {
	t.Helper()
	res, err := listener.Generator{}.Generate(proxy, push, &model.WatchedResource{TypeURL: model.ListenerType, Wildcard: true}, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range decode(t, res, func() *listenerv3.Listener { return &listenerv3.Listener{} }) {
		for _, h := range connManagers(t, l) {
			if slices.Contains(nt.HTTPFilterNames(h), lua) {
				with++
			} else {
				without++
			}
		}
	}
	return with, without
}

// TestEnvoyFilterCache: warm LDS stays cached across proxies that share
// the same EnvoyFilters; proxies the filters do not select share the
// unpatched entries; a new version of the filter is served without any
// invalidation of listeners; cached output equals uncached output.
func TestEnvoyFilterCache(t *testing.T) {
	in := nt.Scale(60)
	in.Configs = append(in.Configs, scaleEnvoyFilter(t, "envoy.lua", "1"))
	var hits, misses atomic.Int64
	in.Cache = countingCache(&hits, &misses)
	env := in.Environment()
	push := model.NewPushContext(env, nil, nil)

	podA := nt.ScaleProxy()
	podB := nt.Proxy("10.200.0.9", "svc-0-pod-b", "ns0", map[string]string{"app": "svc-0", "version": "v2"})
	if with, _ := luaListeners(t, podA, push, "envoy.lua"); with == 0 {
		t.Fatal("pod A: no connection manager got the Lua filter")
	}
	hits.Store(0)
	misses.Store(0)
	if with, without := luaListeners(t, podB, push, "envoy.lua"); with == 0 || without != 0 {
		t.Errorf("pod B: %d patched, %d unpatched connection managers", with, without)
	}
	if misses.Load() != 0 || hits.Load() == 0 {
		t.Errorf("pod B (same EnvoyFilters): %d hits, %d misses; want all hits", hits.Load(), misses.Load())
	}

	client := nt.Proxy("10.9.9.9", "client", "ns0", nil) // not selected
	if with, _ := luaListeners(t, client, push, "envoy.lua"); with != 0 {
		t.Errorf("unselected proxy got %d patched connection managers", with)
	}

	// Cached equals uncached, for selected and unselected proxies.
	uncachedIn := in
	uncachedIn.Cache = nil
	uncached := uncachedIn.PushContext()
	for _, p := range append(scaleProxies(), podB) {
		sameResources(t, "with EnvoyFilter "+p.ID, generateAll(t, p, push), generateAll(t, p, uncached))
	}

	// A new version: only the EnvoyFilter changed; the listeners it patches
	// are not invalidated, yet the new content is served.
	next := in
	next.Configs = slices.Clone(in.Configs)
	next.Configs[len(next.Configs)-1] = scaleEnvoyFilter(t, "envoy.lua.v2", "2")
	env.ConfigStore = next.Environment().ConfigStore
	req := model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: model.KindEnvoyFilter, Name: "lua", Namespace: "ns0"})
	in.Cache.Invalidate(req)
	pushed := model.NewPushContext(env, push, req)
	if with, without := luaListeners(t, podA, pushed, "envoy.lua.v2"); with == 0 || without != 0 {
		t.Errorf("after update: %d connection managers with the new filter, %d without", with, without)
	}
	if envoyfilter.IndexFor(pushed, envoyfilter.Reporter{}) == envoyfilter.IndexFor(push, envoyfilter.Reporter{}) {
		t.Error("the compiled EnvoyFilters were reused after they changed")
	}
	// An unrelated change keeps the compiled index.
	req2 := model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: model.KindVirtualService, Name: "svc-0", Namespace: "ns0"})
	if envoyfilter.IndexFor(model.NewPushContext(env, pushed, req2), envoyfilter.Reporter{}) != envoyfilter.IndexFor(pushed, envoyfilter.Reporter{}) {
		t.Error("the compiled EnvoyFilters were rebuilt though they did not change")
	}
}

// meshWideFilter is a root-namespace EnvoyFilter putting a header-mutation
// filter first in every HTTP connection manager.
func meshWideFilter(t testing.TB) model.Config {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(`
configPatches:
- applyTo: HTTP_FILTER
  match: {listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}
  patch:
    operation: INSERT_FIRST
    value:
      name: envoy.filters.http.header_mutation
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation
        mutations: {request_mutations: [{remove: x-debug}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	ef := &networking.EnvoyFilter{}
	if err := protojson.Unmarshal(js, ef); err != nil {
		t.Fatal(err)
	}
	return model.Config{Meta: model.Meta{Kind: model.KindEnvoyFilter, Name: "header-fix", Namespace: "istio-system", ResourceVersion: "1"}, Spec: ef}
}
