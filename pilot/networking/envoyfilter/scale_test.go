package envoyfilter_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
)

// sidecarListeners are an outbound listener (one chain with a connection
// manager over RDS, one tcp_proxy chain) and virtualInbound (a chain with a
// connection manager with an inline route configuration, a tcp_proxy chain).
func sidecarListeners(t testing.TB) []struct {
	ctx envoyfilter.Context
	l   *listenerv3.Listener
} {
	return []struct {
		ctx envoyfilter.Context
		l   *listenerv3.Listener
	}{{envoyfilter.SidecarOutbound, outboundListener(t)}, {envoyfilter.SidecarInbound, virtualInboundListener(t)}}
}

// TestHTTPFilterPatchesDecodeOnce: however many HTTP_FILTER patches apply,
// each connection manager is decoded and encoded once and the listener
// validated once (the patches used to decode and encode it once each).
func TestHTTPFilterPatchesDecodeOnce(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 10, 200} {
		ps := patchesFor(t, envoyfilter.Reporter{}, manyHTTPFilters(t, n, -1))
		for _, sl := range sidecarListeners(t) {
			l, ok, st := ps.ListenerStats(sl.ctx, sl.l)
			if !ok {
				t.Fatal("removed")
			}
			if got := len(httpFilters(t, l, 0)); got != n+2 {
				t.Errorf("n=%d %s: %d HTTP filters, want %d", n, l.GetName(), got, n+2)
			}
			if st.Decodes() != 1 || st.Encodes() != 1 || st.Validations() != 1 {
				t.Errorf("n=%d %s: %d decodes, %d encodes, %d validations of the listener, want 1 each",
					n, l.GetName(), st.Decodes(), st.Encodes(), st.Validations())
			}
		}
	}
}

// TestHTTPFilterPatchesWorkIsLinear: the allocations of patching a
// listener with 4n HTTP_FILTER patches are about 4 times those with n (they
// were about 16 times: every patch decoded and encoded the connection
// manager with the filters of the patches before it, and with one invalid
// patch every patch validated the whole listener). Allocations, not time:
// they do not depend on the machine. Not parallel: AllocsPerRun counts
// the allocations of every goroutine.
func TestHTTPFilterPatchesWorkIsLinear(t *testing.T) {
	n := 100
	for _, invalid := range []bool{false, true} {
		allocs := func(n int) float64 {
			bad := -1
			if invalid {
				bad = n / 2
			}
			ps := patchesFor(t, envoyfilter.Reporter{}, manyHTTPFilters(t, n, bad))
			l := outboundListener(t)
			return testing.AllocsPerRun(1, func() {
				if _, ok := ps.Listener(envoyfilter.SidecarOutbound, l); !ok {
					t.Fatal("removed")
				}
			})
		}
		small, big := allocs(n), allocs(4*n)
		if big > 6*small {
			t.Errorf("invalid=%v: %d patches: %.0f allocations, %d patches: %.0f (%.1f times; linear is 4)",
				invalid, n, small, 4*n, big, big/small)
		}
	}
}

// TestOneInvalidAmongManyPatches: with 1,000 HTTP_FILTER patches of which
// one makes the listener invalid, the result is the listener patched by the
// 999 others, the invalid one is reported once, and the listener is
// validated a fixed number of times (not once per patch).
func TestOneInvalidAmongManyPatches(t *testing.T) {
	t.Parallel()
	n := 1000
	if testing.Short() {
		n = 200
	}
	bad := n / 2
	var rec recorder
	ps := patchesFor(t, rec.reporter(), manyHTTPFilters(t, n, bad))
	// The same patches without the invalid one.
	want := patchesFor(t, envoyfilter.Reporter{}, httpFilterPatches(t, n, -1, bad))
	for _, sl := range sidecarListeners(t) {
		l, ok, st := ps.ListenerStats(sl.ctx, sl.l)
		if !ok {
			t.Fatal("removed")
		}
		w, _ := want.Listener(sl.ctx, sl.l)
		if !proto.Equal(l, w) {
			t.Errorf("%s: result differs from the listener patched without the invalid patch", l.GetName())
		}
		if got := len(httpFilters(t, l, 0)); got != n+1 {
			t.Errorf("%s: %d HTTP filters, want %d", l.GetName(), got, n+1)
		}
		if st.Validations() > 3 || st.Decodes() > 2 || st.Encodes() > 2 {
			t.Errorf("%s: %d validations, %d decodes, %d encodes of the listener, want at most 3, 2, 2",
				l.GetName(), st.Validations(), st.Decodes(), st.Encodes())
		}
	}
	logs := rec.logText()
	if n := strings.Count(logs, "level=WARN"); n != 2 {
		t.Errorf("%d warnings, want one per listener:\n%s", n, logs)
	}
	where := fmt.Sprintf(`field="spec.configPatches[%d] (HTTP_FILTER INSERT_BEFORE)"`, bad)
	if strings.Count(logs, where) != 2 || !strings.Contains(logs, "result is not valid Envoy config") ||
		!strings.Contains(logs, "HttpFilter.Name") {
		t.Errorf("invalid patch not reported as %s:\n%s", where, logs)
	}
	if got := rec.status["default/many"]; got != envoyfilter.StatusError {
		t.Errorf("status = %q, want %q", got, envoyfilter.StatusError)
	}
}

// TestSlowPathAgreesWithOneByOne: when the result of all patches is not
// valid, the patches kept and those reported are the ones applying and
// validating one patch at a time keeps and rejects, for every kind of
// listener patch, valid and invalid ones mixed.
func TestSlowPathAgreesWithOneByOne(t *testing.T) {
	t.Parallel()
	spec := `
configPatches:
- applyTo: LISTENER
  patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 1024}}
- applyTo: LISTENER_FILTER
  patch: {operation: INSERT_FIRST, value: {name: ""}}
- applyTo: LISTENER_FILTER
  patch: {operation: ADD, value: {name: envoy.filters.listener.original_dst, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst}}}
- applyTo: FILTER_CHAIN
  match: {listener: {filterChain: {sni: a.example.com}}}
  patch: {operation: MERGE, value: {filter_chain_match: {server_names: ["*w.example.com"]}}}
- applyTo: FILTER_CHAIN
  match: {listener: {filterChain: {sni: a.example.com}}}
  patch: {operation: MERGE, value: {filter_chain_match: {server_names: ["*.b.example.com"]}}}
- applyTo: NETWORK_FILTER
  match: {listener: {filterChain: {filter: {name: envoy.filters.network.tcp_proxy}}}}
  patch: {operation: INSERT_BEFORE, value: {name: limit, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit, max_connections: 10}}}
- applyTo: NETWORK_FILTER
  match: {listener: {filterChain: {filter: {name: envoy.filters.network.tcp_proxy}}}}
  patch: {operation: INSERT_AFTER, value: {name: echo, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.echo.v3.Echo}}}
- applyTo: HTTP_FILTER
  match: {listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}}
  patch: {operation: INSERT_BEFORE, value: {name: lua-a, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua}}}
- applyTo: HTTP_FILTER
  patch: {operation: INSERT_FIRST, value: {typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua}}}
- applyTo: HTTP_FILTER
  match: {listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: lua-a}}}}}
  patch: {operation: REPLACE, value: {typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua}}}
- applyTo: HTTP_FILTER
  match: {listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: lua-a}}}}}
  patch: {operation: MERGE, value: {typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, default_source_code: {inline_string: "x"}}}}
- applyTo: HTTP_FILTER
  match: {listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.fault}}}}}
  patch: {operation: MERGE, value: {name: ""}}
- applyTo: HTTP_FILTER
  patch: {operation: ADD, value: {name: lua-b, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua}}}
- applyTo: ROUTE_CONFIGURATION
  patch: {operation: MERGE, value: {request_headers_to_remove: [""]}}
- applyTo: ROUTE_CONFIGURATION
  patch: {operation: MERGE, value: {request_headers_to_remove: [x-internal]}}
- applyTo: VIRTUAL_HOST
  patch: {operation: ADD, value: {name: nodomains}}
- applyTo: VIRTUAL_HOST
  patch: {operation: ADD, value: {name: extra, domains: [extra.example.com]}}
- applyTo: HTTP_ROUTE
  patch: {operation: INSERT_FIRST, value: {name: nomatch, route: {cluster: c}}}
- applyTo: HTTP_ROUTE
  match: {routeConfiguration: {vhost: {route: {name: default}}}}
  patch: {operation: INSERT_BEFORE, value: {name: first, match: {prefix: /a}, route: {cluster: c}}}
- applyTo: HTTP_ROUTE
  match: {routeConfiguration: {vhost: {route: {name: default}}}}
  patch: {operation: MERGE, value: {match: {prefix: /b}}}
`
	var fastRec, refRec recorder
	fast := patchesFor(t, fastRec.reporter(), envoyFilter(t, "default", "mixed", spec))
	ref := patchesFor(t, refRec.reporter(), envoyFilter(t, "default", "mixed", spec))
	for _, sl := range sidecarListeners(t) {
		got, ok, st := fast.ListenerStats(sl.ctx, sl.l)
		if !ok {
			t.Fatal("removed")
		}
		if st.Validations() != 3 {
			t.Errorf("%s: %d validations, want 3 (the slow path must be taken)", sl.l.GetName(), st.Validations())
		}
		want := ref.ListenerOneByOne(sl.ctx, sl.l)
		if !proto.Equal(got, want) {
			t.Errorf("%s: slow path result differs from one patch at a time:\n got %v\nwant %v", sl.l.GetName(), got, want)
		}
		if err := got.ValidateAll(); err != nil {
			t.Errorf("%s: result not valid: %v", sl.l.GetName(), err)
		}
	}
	gotR, wantR := rejected(fastRec.logText()), rejected(refRec.logText())
	if !slices.Equal(gotR, wantR) || len(wantR) < 8 {
		t.Errorf("rejected patches = %q,\nwant %q", gotR, wantR)
	}
}

// rejected lists the patch and resource of each warning in logs.
func rejected(logs string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		f, e, ok := strings.Cut(line, " error=")
		if !ok {
			continue
		}
		_, field, _ := strings.Cut(f, "field=")
		res, _, _ := strings.Cut(e, ": ")
		out = append(out, field+" "+res)
	}
	slices.Sort(out)
	return out
}
