package envoyfilter_test

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
)

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

const luaValue = `
          name: envoy.lua
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
            default_source_code: {inline_string: "function envoy_on_request(h) end"}`

// TestListenerPatches covers every operation Istio supports for LISTENER,
// LISTENER_FILTER, FILTER_CHAIN, NETWORK_FILTER and HTTP_FILTER on a
// sidecar's outbound listener.
func TestListenerPatches(t *testing.T) {
	hcmMatch := `
        listener:
          filterChain:
            filter:
              name: envoy.filters.network.http_connection_manager`
	routerMatch := hcmMatch + `
              subFilter:
                name: envoy.filters.http.router`
	cases := []struct {
		name, patches string
		removed       bool
		check         func(t *testing.T, l *listenerv3.Listener)
	}{
		{name: "LISTENER MERGE", patches: `
    - applyTo: LISTENER
      match: {context: SIDECAR_OUTBOUND, listener: {portNumber: 8080}}
      patch:
        operation: MERGE
        value: {per_connection_buffer_limit_bytes: 1024}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				if l.GetPerConnectionBufferLimitBytes().GetValue() != 1024 || len(l.FilterChains) != 2 {
					t.Errorf("listener = %v", l)
				}
			}},
		{name: "LISTENER REMOVE", removed: true, patches: `
    - applyTo: LISTENER
      match: {listener: {name: 0.0.0.0_8080}}
      patch: {operation: REMOVE}`},
		{name: "LISTENER REMOVE other port", patches: `
    - applyTo: LISTENER
      match: {listener: {portNumber: 9999}}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "chains", names(l.FilterChains), []string{"http", "tls"})
			}},
		{name: "LISTENER_FILTER ADD", patches: `
    - applyTo: LISTENER_FILTER
      patch:
        operation: ADD
        value: {name: envoy.filters.listener.original_dst, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "listener filters", names(l.ListenerFilters), []string{"envoy.filters.listener.tls_inspector", "envoy.filters.listener.http_inspector", "envoy.filters.listener.original_dst"})
			}},
		{name: "LISTENER_FILTER INSERT_FIRST", patches: `
    - applyTo: LISTENER_FILTER
      patch:
        operation: INSERT_FIRST
        value: {name: envoy.filters.listener.original_dst, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "listener filters", names(l.ListenerFilters), []string{"envoy.filters.listener.original_dst", "envoy.filters.listener.tls_inspector", "envoy.filters.listener.http_inspector"})
			}},
		{name: "LISTENER_FILTER INSERT_BEFORE", patches: `
    - applyTo: LISTENER_FILTER
      match: {listener: {listenerFilter: envoy.filters.listener.http_inspector}}
      patch:
        operation: INSERT_BEFORE
        value: {name: envoy.filters.listener.original_dst, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "listener filters", names(l.ListenerFilters), []string{"envoy.filters.listener.tls_inspector", "envoy.filters.listener.original_dst", "envoy.filters.listener.http_inspector"})
			}},
		{name: "LISTENER_FILTER INSERT_AFTER", patches: `
    - applyTo: LISTENER_FILTER
      match: {listener: {listenerFilter: envoy.filters.listener.tls_inspector}}
      patch:
        operation: INSERT_AFTER
        value: {name: envoy.filters.listener.original_dst, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "listener filters", names(l.ListenerFilters), []string{"envoy.filters.listener.tls_inspector", "envoy.filters.listener.original_dst", "envoy.filters.listener.http_inspector"})
			}},
		{name: "LISTENER_FILTER REPLACE", patches: `
    - applyTo: LISTENER_FILTER
      match: {listener: {listenerFilter: envoy.filters.listener.http_inspector}}
      patch:
        operation: REPLACE
        value: {name: envoy.filters.listener.original_dst, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "listener filters", names(l.ListenerFilters), []string{"envoy.filters.listener.tls_inspector", "envoy.filters.listener.original_dst"})
			}},
		{name: "LISTENER_FILTER REMOVE", patches: `
    - applyTo: LISTENER_FILTER
      match: {listener: {listenerFilter: envoy.filters.listener.http_inspector}}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "listener filters", names(l.ListenerFilters), []string{"envoy.filters.listener.tls_inspector"})
			}},
		{name: "LISTENER_FILTER MERGE", patches: `
    - applyTo: LISTENER_FILTER
      match: {listener: {listenerFilter: envoy.filters.listener.tls_inspector}}
      patch:
        operation: MERGE
        value: {typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector, enable_ja3_fingerprinting: true}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				ti := &tlsinspector.TlsInspector{}
				if err := l.ListenerFilters[0].GetTypedConfig().UnmarshalTo(ti); err != nil || !ti.GetEnableJa3Fingerprinting().GetValue() {
					t.Errorf("tls_inspector not merged: %v, %v", ti, err)
				}
			}},
		{name: "FILTER_CHAIN ADD", patches: `
    - applyTo: FILTER_CHAIN
      match: {listener: {portNumber: 8080}}
      patch:
        operation: ADD
        value:
          name: extra
          filter_chain_match: {server_names: [extra.example.com]}
          filters: [{name: envoy.filters.network.tcp_proxy, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: x, cluster: x}}]`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "chains", names(l.FilterChains), []string{"http", "tls", "extra"})
			}},
		{name: "FILTER_CHAIN REMOVE by sni", patches: `
    - applyTo: FILTER_CHAIN
      match: {listener: {filterChain: {sni: a.example.com}}}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, l *listenerv3.Listener) { eq(t, "chains", names(l.FilterChains), []string{"http"}) }},
		{name: "FILTER_CHAIN MERGE by transportProtocol and ALPN", patches: `
    - applyTo: FILTER_CHAIN
      match: {listener: {filterChain: {transportProtocol: tls, applicationProtocols: h2}}}
      patch:
        operation: MERGE
        value: {filter_chain_match: {server_names: [b.example.com]}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "tls SNIs", l.FilterChains[1].GetFilterChainMatch().GetServerNames(), []string{"a.example.com", "b.example.com"})
				if l.FilterChains[0].GetFilterChainMatch() != nil {
					t.Error("http chain changed")
				}
			}},
		{name: "FILTER_CHAIN by name does not match", patches: `
    - applyTo: FILTER_CHAIN
      match: {listener: {filterChain: {name: nope}}}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "chains", names(l.FilterChains), []string{"http", "tls"})
			}},
		{name: "NETWORK_FILTER INSERT_BEFORE", patches: `
    - applyTo: NETWORK_FILTER
      match: {listener: {filterChain: {filter: {name: envoy.filters.network.tcp_proxy}}}}
      patch:
        operation: INSERT_BEFORE
        value: {name: envoy.filters.network.connection_limit, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit, stat_prefix: c, max_connections: 10}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "tls filters", names(l.FilterChains[1].Filters), []string{"envoy.filters.network.connection_limit", "envoy.filters.network.tcp_proxy"})
				eq(t, "http filters", names(l.FilterChains[0].Filters), []string{"envoy.filters.network.http_connection_manager"})
			}},
		{name: "NETWORK_FILTER INSERT_AFTER", patches: `
    - applyTo: NETWORK_FILTER
      match: {listener: {filterChain: {filter: {name: envoy.filters.network.tcp_proxy}}}}
      patch:
        operation: INSERT_AFTER
        value: {name: envoy.filters.network.echo, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.echo.v3.Echo}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "tls filters", names(l.FilterChains[1].Filters), []string{"envoy.filters.network.tcp_proxy", "envoy.filters.network.echo"})
			}},
		{name: "NETWORK_FILTER INSERT_FIRST and ADD", patches: `
    - applyTo: NETWORK_FILTER
      match: {listener: {filterChain: {name: tls}}}
      patch:
        operation: INSERT_FIRST
        value: {name: first, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit, stat_prefix: c, max_connections: 10}}
    - applyTo: NETWORK_FILTER
      match: {listener: {filterChain: {name: tls}}}
      patch:
        operation: ADD
        value: {name: last, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.echo.v3.Echo}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "tls filters", names(l.FilterChains[1].Filters), []string{"first", "envoy.filters.network.tcp_proxy", "last"})
			}},
		{name: "NETWORK_FILTER REPLACE", patches: `
    - applyTo: NETWORK_FILTER
      match: {listener: {filterChain: {filter: {name: envoy.tcp_proxy}}}}
      patch:
        operation: REPLACE
        value: {name: envoy.filters.network.tcp_proxy, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: replaced, cluster: replaced}}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				if !strings.Contains(string(l.FilterChains[1].Filters[0].GetTypedConfig().GetValue()), "replaced") {
					t.Error("tcp_proxy not replaced")
				}
			}},
		{name: "NETWORK_FILTER REMOVE", patches: `
    - applyTo: NETWORK_FILTER
      match: {listener: {filterChain: {sni: a.example.com, filter: {name: envoy.filters.network.tcp_proxy}}}}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "tls filters", names(l.FilterChains[1].Filters), []string{})
				eq(t, "http filters", names(l.FilterChains[0].Filters), []string{"envoy.filters.network.http_connection_manager"})
			}},
		{name: "NETWORK_FILTER MERGE unpacks typed_config", patches: `
    - applyTo: NETWORK_FILTER
      match: {listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}
      patch:
        operation: MERGE
        value:
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
            server_name: patched`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				h := hcmOf(t, l, 0)
				if h.GetServerName() != "patched" || len(h.GetHttpFilters()) != 2 || h.GetRds().GetRouteConfigName() != "8080" {
					t.Errorf("hcm = %v", h)
				}
			}},
		{name: "HTTP_FILTER INSERT_BEFORE router", patches: `
    - applyTo: HTTP_FILTER
      match:` + routerMatch + `
      patch:
        operation: INSERT_BEFORE
        value:` + luaValue,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "http filters", httpFilters(t, l, 0), []string{"envoy.filters.http.fault", "envoy.lua", "envoy.filters.http.router"})
			}},
		{name: "HTTP_FILTER INSERT_AFTER fault", patches: `
    - applyTo: HTTP_FILTER
      match:` + hcmMatch + `
              subFilter: {name: envoy.filters.http.fault}
      patch:
        operation: INSERT_AFTER
        value:` + luaValue,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "http filters", httpFilters(t, l, 0), []string{"envoy.filters.http.fault", "envoy.lua", "envoy.filters.http.router"})
			}},
		{name: "HTTP_FILTER INSERT_FIRST", patches: `
    - applyTo: HTTP_FILTER
      match:` + hcmMatch + `
      patch:
        operation: INSERT_FIRST
        value:` + luaValue,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "http filters", httpFilters(t, l, 0), []string{"envoy.lua", "envoy.filters.http.fault", "envoy.filters.http.router"})
			}},
		{name: "HTTP_FILTER ADD", patches: `
    - applyTo: HTTP_FILTER
      patch:
        operation: ADD
        value:` + luaValue,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "http filters", httpFilters(t, l, 0), []string{"envoy.filters.http.fault", "envoy.filters.http.router", "envoy.lua"})
			}},
		{name: "HTTP_FILTER REPLACE", patches: `
    - applyTo: HTTP_FILTER
      match:` + hcmMatch + `
              subFilter: {name: envoy.filters.http.fault}
      patch:
        operation: REPLACE
        value:` + luaValue,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "http filters", httpFilters(t, l, 0), []string{"envoy.lua", "envoy.filters.http.router"})
			}},
		{name: "HTTP_FILTER REMOVE", patches: `
    - applyTo: HTTP_FILTER
      match:` + hcmMatch + `
              subFilter: {name: envoy.filters.http.fault}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "http filters", httpFilters(t, l, 0), []string{"envoy.filters.http.router"})
			}},
		{name: "HTTP_FILTER MERGE unpacks typed_config", patches: `
    - applyTo: HTTP_FILTER
      match:` + hcmMatch + `
              subFilter: {name: envoy.filters.http.fault}
      patch:
        operation: MERGE
        value:
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault
            max_active_faults: 7`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				f := &faultv3.HTTPFault{}
				if err := hcmOf(t, l, 0).GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(f); err != nil || f.GetMaxActiveFaults().GetValue() != 7 {
					t.Errorf("fault = %v, %v", f, err)
				}
			}},
		{name: "HTTP_FILTER on other context", patches: `
    - applyTo: HTTP_FILTER
      match: {context: SIDECAR_INBOUND}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "http filters", httpFilters(t, l, 0), []string{"envoy.filters.http.fault", "envoy.filters.http.router"})
			}},
		{name: "HTTP_FILTER proxy version mismatch", patches: `
    - applyTo: HTTP_FILTER
      match: {proxy: {proxyVersion: '^1\.9.*'}}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "http filters", httpFilters(t, l, 0), []string{"envoy.filters.http.fault", "envoy.filters.http.router"})
			}},
		{name: "HTTP_FILTER proxy version and metadata match", patches: `
    - applyTo: HTTP_FILTER
      match:
        proxy: {proxyVersion: '^1\.24.*', metadata: {NAMESPACE: default}}
        listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.fault}}}}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, l *listenerv3.Listener) {
				eq(t, "http filters", httpFilters(t, l, 0), []string{"envoy.filters.http.router"})
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			ps := patchesFor(t, rec.reporter(), envoyFilter(t, "default", "ef", "configPatches:"+tc.patches))
			orig := outboundListener(t)
			before := proto.Clone(orig)
			l, ok := ps.Listener(envoyfilter.SidecarOutbound, orig)
			if !proto.Equal(orig, before) {
				t.Error("the input listener was changed")
			}
			if ok == tc.removed {
				t.Fatalf("kept = %v, want %v", ok, !tc.removed)
			}
			if !ok {
				return
			}
			if err := l.ValidateAll(); err != nil {
				t.Errorf("patched listener is not valid: %v", err)
			}
			tc.check(t, l)
			if l := rec.logText(); l != "" {
				t.Errorf("unexpected warnings: %s", l)
			}
		})
	}
}

// TestInboundPatches: on virtualInbound, portNumber selects filter chains
// by destination port, and route patches reach the inline route configuration.
func TestInboundPatches(t *testing.T) {
	var rec recorder
	ps := patchesFor(t, rec.reporter(), envoyFilter(t, "default", "ef", `
configPatches:
- applyTo: HTTP_FILTER
  match:
    context: SIDECAR_INBOUND
    listener:
      portNumber: 9080
      filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}
  patch:
    operation: INSERT_BEFORE
    value:`+luaValue+`
- applyTo: NETWORK_FILTER
  match: {context: SIDECAR_INBOUND, listener: {portNumber: 9090, filterChain: {filter: {name: envoy.filters.network.tcp_proxy}}}}
  patch:
    operation: INSERT_FIRST
    value: {name: envoy.filters.network.connection_limit, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit, stat_prefix: c, max_connections: 10}}
- applyTo: HTTP_ROUTE
  match: {context: SIDECAR_INBOUND, routeConfiguration: {vhost: {name: "inbound|http|9080", route: {action: ANY}}}}
  patch:
    operation: MERGE
    value: {route: {timeout: 3s}}
`))
	l, ok := ps.Listener(envoyfilter.SidecarInbound, virtualInboundListener(t))
	if !ok {
		t.Fatal("removed")
	}
	eq(t, "9080 http filters", httpFilters(t, l, 0), []string{"envoy.filters.http.fault", "envoy.lua", "envoy.filters.http.router"})
	eq(t, "9090 filters", names(l.FilterChains[1].Filters), []string{"envoy.filters.network.connection_limit", "envoy.filters.network.tcp_proxy"})
	r := hcmOf(t, l, 0).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0]
	if r.GetRoute().GetTimeout().AsDuration().Seconds() != 3 || r.GetRoute().GetCluster() != "inbound|9080||" {
		t.Errorf("inbound route = %v", r)
	}
	if s := rec.status["default/ef"]; s != envoyfilter.StatusApplied {
		t.Errorf("status = %q, want applied", s)
	}
	// The outbound listener is left alone.
	if out, _ := ps.Listener(envoyfilter.SidecarOutbound, outboundListener(t)); !proto.Equal(out, outboundListener(t)) {
		t.Error("outbound listener patched by SIDECAR_INBOUND patches")
	}
}

// TestRoutePatches covers ROUTE_CONFIGURATION, VIRTUAL_HOST and HTTP_ROUTE.
func TestRoutePatches(t *testing.T) {
	newRoute := `{name: new, match: {prefix: /new}, direct_response: {status: 204}}`
	cases := []struct {
		name, patches string
		info          envoyfilter.RouteInfo
		check         func(t *testing.T, rc *routev3.RouteConfiguration)
	}{
		{name: "ROUTE_CONFIGURATION MERGE", patches: `
    - applyTo: ROUTE_CONFIGURATION
      match: {routeConfiguration: {portNumber: 8080}}
      patch: {operation: MERGE, value: {validate_clusters: true, request_headers_to_remove: [x-debug]}}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				if !rc.GetValidateClusters().GetValue() || !slices.Equal(rc.GetRequestHeadersToRemove(), []string{"x-debug"}) || len(rc.VirtualHosts) != 2 {
					t.Errorf("rc = %v", rc)
				}
			}},
		{name: "VIRTUAL_HOST MERGE appends lists, MERGE_AND_REPLACE_LIST replaces them", patches: `
    - applyTo: VIRTUAL_HOST
      match: {routeConfiguration: {vhost: {name: "a.example.com:8080"}}}
      patch: {operation: MERGE, value: {domains: [merged.example.com]}}
    - applyTo: VIRTUAL_HOST
      match: {routeConfiguration: {vhost: {name: "b.example.com:8080"}}}
      patch: {operation: MERGE_AND_REPLACE_LIST, value: {domains: [only.example.com], request_headers_to_add: [{header: {key: x-a, value: "1"}}]}}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				a, b := rc.GetVirtualHosts()[0], rc.GetVirtualHosts()[1]
				if len(a.GetDomains()) < 2 || a.GetDomains()[len(a.GetDomains())-1] != "merged.example.com" {
					t.Errorf("MERGE domains %q: want the original ones, then merged.example.com", a.GetDomains())
				}
				if !slices.Equal(b.GetDomains(), []string{"only.example.com"}) || len(b.GetRequestHeadersToAdd()) != 1 || len(b.GetRoutes()) == 0 {
					t.Errorf("MERGE_AND_REPLACE_LIST vhost %v: want domains replaced, header added, routes kept", b)
				}
			}},
		{name: "ROUTE_CONFIGURATION other port", patches: `
    - applyTo: ROUTE_CONFIGURATION
      match: {routeConfiguration: {portNumber: 9999}}
      patch: {operation: MERGE, value: {validate_clusters: true}}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				if rc.GetValidateClusters() != nil {
					t.Error("patched another port's routes")
				}
			}},
		{name: "VIRTUAL_HOST ADD", patches: `
    - applyTo: VIRTUAL_HOST
      match: {routeConfiguration: {name: "8080"}}
      patch: {operation: ADD, value: {name: extra, domains: [extra.example.com], routes: [` + newRoute + `]}}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				eq(t, "vhosts", names(rc.VirtualHosts), []string{"a.example.com:8080", "b.example.com:8080", "extra"})
			}},
		{name: "VIRTUAL_HOST REMOVE", patches: `
    - applyTo: VIRTUAL_HOST
      match: {routeConfiguration: {vhost: {name: "b.example.com:8080"}}}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				eq(t, "vhosts", names(rc.VirtualHosts), []string{"a.example.com:8080"})
			}},
		{name: "VIRTUAL_HOST MERGE all", patches: `
    - applyTo: VIRTUAL_HOST
      match: {routeConfiguration: {vhost: {name: ""}}}
      patch: {operation: MERGE, value: {rate_limits: [{actions: [{remote_address: {}}]}]}}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				for _, vh := range rc.VirtualHosts {
					if len(vh.GetRateLimits()) != 1 {
						t.Errorf("vhost %s rate limits = %v", vh.GetName(), vh.GetRateLimits())
					}
				}
			}},
		{name: "HTTP_ROUTE MERGE by action", patches: `
    - applyTo: HTTP_ROUTE
      match: {routeConfiguration: {vhost: {name: "a.example.com:8080", route: {action: ROUTE}}}}
      patch: {operation: MERGE, value: {route: {timeout: 5s}, request_headers_to_add: [{header: {key: x-a, value: "1"}}]}}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				rs := rc.VirtualHosts[0].Routes
				if rs[1].GetRoute().GetTimeout().AsDuration().Seconds() != 5 || rs[1].GetRoute().GetCluster() != "outbound|8080||a.example.com" ||
					len(rs[1].GetRequestHeadersToAdd()) != 1 || len(rs[0].GetRequestHeadersToAdd()) != 0 {
					t.Errorf("routes = %v", rs)
				}
				if rc.VirtualHosts[1].Routes[0].GetRoute().GetTimeout() != nil {
					t.Error("patched another vhost")
				}
			}},
		{name: "HTTP_ROUTE REMOVE by name", patches: `
    - applyTo: HTTP_ROUTE
      match: {routeConfiguration: {vhost: {route: {name: redirect}}}}
      patch: {operation: REMOVE}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				eq(t, "routes", names(rc.VirtualHosts[0].Routes), []string{"r1"})
			}},
		{name: "HTTP_ROUTE INSERT_BEFORE", patches: `
    - applyTo: HTTP_ROUTE
      match: {routeConfiguration: {vhost: {name: "a.example.com:8080", route: {name: r1}}}}
      patch: {operation: INSERT_BEFORE, value: ` + newRoute + `}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				eq(t, "routes", names(rc.VirtualHosts[0].Routes), []string{"redirect", "new", "r1"})
			}},
		{name: "HTTP_ROUTE INSERT_AFTER", patches: `
    - applyTo: HTTP_ROUTE
      match: {routeConfiguration: {vhost: {name: "a.example.com:8080", route: {action: REDIRECT}}}}
      patch: {operation: INSERT_AFTER, value: ` + newRoute + `}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				eq(t, "routes", names(rc.VirtualHosts[0].Routes), []string{"redirect", "new", "r1"})
			}},
		{name: "HTTP_ROUTE INSERT_FIRST", patches: `
    - applyTo: HTTP_ROUTE
      match: {routeConfiguration: {vhost: {name: "b.example.com:8080"}}}
      patch: {operation: INSERT_FIRST, value: ` + newRoute + `}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				eq(t, "routes", names(rc.VirtualHosts[1].Routes), []string{"new", "b"})
				eq(t, "a routes", names(rc.VirtualHosts[0].Routes), []string{"redirect", "r1"})
			}},
		{name: "gateway portName and gateway", info: envoyfilter.RouteInfoFor("https.443.https-main.gw.istio-system"), patches: `
    - applyTo: ROUTE_CONFIGURATION
      match: {routeConfiguration: {portNumber: 443, portName: https-main, gateway: istio-system/gw}}
      patch: {operation: MERGE, value: {validate_clusters: true}}`,
			check: func(t *testing.T, rc *routev3.RouteConfiguration) {
				if !rc.GetValidateClusters().GetValue() {
					t.Error("gateway route configuration not patched")
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			ps := patchesFor(t, rec.reporter(), envoyFilter(t, "default", "ef", "configPatches:"+tc.patches))
			info := tc.info
			if info == (envoyfilter.RouteInfo{}) {
				info = envoyfilter.RouteInfoFor("8080")
			}
			orig := routeConfig()
			rc := ps.RouteConfiguration(envoyfilter.SidecarOutbound, orig, info)
			if !proto.Equal(orig, routeConfig()) {
				t.Error("the input was changed")
			}
			if err := rc.ValidateAll(); err != nil {
				t.Errorf("patched routes not valid: %v", err)
			}
			tc.check(t, rc)
			if l := rec.logText(); l != "" {
				t.Errorf("unexpected warnings: %s", l)
			}
		})
	}
}

// TestClusterPatches covers CLUSTER MERGE, REMOVE and ADD with the
// cluster match fields.
func TestClusterPatches(t *testing.T) {
	a1 := edsCluster("v1", "a.default.svc.cluster.local", 8080)
	a := edsCluster("", "a.default.svc.cluster.local", 8080)
	b := edsCluster("", "b.default.svc.cluster.local", 9090)
	all := []*clusterv3.Cluster{a, a1, b, staticCluster("BlackHoleCluster")}
	cases := []struct {
		name, patches string
		want          []string
		check         func(t *testing.T, cs []*clusterv3.Cluster)
	}{
		{name: "MERGE by service", patches: `
    - applyTo: CLUSTER
      match: {cluster: {service: a.default.svc.cluster.local}}
      patch: {operation: MERGE, value: {connect_timeout: 1s, per_connection_buffer_limit_bytes: 2048}}`,
			want: []string{a.Name, a1.Name, b.Name, "BlackHoleCluster"},
			check: func(t *testing.T, cs []*clusterv3.Cluster) {
				if cs[0].GetConnectTimeout().AsDuration().Seconds() != 1 || cs[1].GetPerConnectionBufferLimitBytes().GetValue() != 2048 ||
					cs[2].GetPerConnectionBufferLimitBytes() != nil || cs[0].GetEdsClusterConfig() == nil {
					t.Errorf("clusters = %v", cs)
				}
			}},
		{name: "REMOVE by subset", patches: `
    - applyTo: CLUSTER
      match: {cluster: {subset: v1}}
      patch: {operation: REMOVE}`,
			want: []string{a.Name, b.Name, "BlackHoleCluster"}},
		{name: "REMOVE by port", patches: `
    - applyTo: CLUSTER
      match: {cluster: {portNumber: 9090}}
      patch: {operation: REMOVE}`,
			want: []string{a.Name, a1.Name, "BlackHoleCluster"}},
		{name: "REMOVE by name", patches: `
    - applyTo: CLUSTER
      match: {cluster: {name: BlackHoleCluster}}
      patch: {operation: REMOVE}`,
			want: []string{a.Name, a1.Name, b.Name}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			ps := patchesFor(t, rec.reporter(), envoyFilter(t, "default", "ef", "configPatches:"+tc.patches))
			cs := ps.Clusters(envoyfilter.SidecarOutbound, all)
			eq(t, "clusters", names(cs), tc.want)
			for _, c := range cs {
				if err := c.ValidateAll(); err != nil {
					t.Errorf("%s: %v", c.Name, err)
				}
			}
			if tc.check != nil {
				tc.check(t, cs)
			}
		})
	}
	t.Run("ADD", func(t *testing.T) {
		var rec recorder
		ps := patchesFor(t, rec.reporter(), envoyFilter(t, "default", "ef", `
configPatches:
- applyTo: CLUSTER
  match: {context: SIDECAR_OUTBOUND}
  patch:
    operation: ADD
    value:
      name: lua_cluster
      type: STRICT_DNS
      connect_timeout: 1s
      load_assignment: {cluster_name: lua_cluster, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: lua.example.com, port_value: 80}}}}]}]}
`))
		eq(t, "added", names(ps.AddedClusters(envoyfilter.SidecarOutbound)), []string{"lua_cluster"})
		eq(t, "added on gateways", names(ps.AddedClusters(envoyfilter.Gateway)), []string{})
	})
}
