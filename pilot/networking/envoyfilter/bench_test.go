package envoyfilter_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// manyHTTPFilters is an EnvoyFilter in default with n HTTP_FILTER patches,
// each inserting a Lua filter "lua-I" before every router. When invalid is
// in [0, n), that patch's filter has no name: it parses, but the listener
// it lands in fails validation, so it must be skipped and reported.
func manyHTTPFilters(tb testing.TB, n, invalid int) model.Config {
	return httpFilterPatches(tb, n, invalid, -1)
}

// httpFilterPatches is manyHTTPFilters without patch skip.
func httpFilterPatches(tb testing.TB, n, invalid, skip int) model.Config {
	tb.Helper()
	var b strings.Builder
	b.WriteString("configPatches:\n")
	for i := range n {
		if i == skip {
			continue
		}
		name := fmt.Sprintf("lua-%d", i)
		if i == invalid {
			name = ""
		}
		fmt.Fprintf(&b, `- applyTo: HTTP_FILTER
  match: {listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}}
  patch:
    operation: INSERT_BEFORE
    value: {name: %q, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, default_source_code: {inline_string: "function envoy_on_request(h) h:headers():add('x-lua', '%d') end"}}}
`, name, i)
	}
	return envoyFilter(tb, "default", "many", b.String())
}

// BenchmarkHTTPFilterPatches is LDS for one sidecar (reviews-v1 of the
// Standard mesh, every listener built, patched, validated and marshalled:
// no cache) with n HTTP_FILTER patches selecting it, and with 1,000 of which
// one makes the result invalid. Under -short n is divided by 50 so that
// make bench-smoke stays quick.
func BenchmarkHTTPFilterPatches(b *testing.B) {
	cases := []struct {
		n, invalid int
	}{{500, -1}, {1000, -1}, {2000, -1}, {1000, 500}}
	for _, c := range cases {
		n, invalid := c.n, c.invalid
		if testing.Short() {
			n /= 50
			if invalid >= 0 {
				invalid /= 50
			}
		}
		name := fmt.Sprintf("patches=%d", n)
		if invalid >= 0 {
			name += "/invalid=1"
		}
		b.Run(name, func(b *testing.B) {
			in := nt.Standard()
			in.Configs = append(in.Configs, manyHTTPFilters(b, n, invalid))
			push := in.PushContext()
			proxy := nt.Proxy(nt.StandardProxy, "reviews-v1", "default", map[string]string{"app": "reviews", "version": "v1"})
			w := &model.WatchedResource{TypeURL: model.ListenerType, Wildcard: true}
			req := &model.PushRequest{Full: true}
			gen := listener.Generator{}
			res, err := gen.Generate(proxy, push, w, req)
			if err != nil {
				b.Fatal(err)
			}
			if last := fmt.Sprintf("lua-%d", n-1); !anyContains(res, last) {
				b.Fatalf("no listener carries %s", last)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := gen.Generate(proxy, push, w, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// anyContains reports whether some resource's bytes contain s.
func anyContains(res model.Resources, s string) bool {
	for _, r := range res {
		if strings.Contains(string(r.GetResource().GetValue()), s) {
			return true
		}
	}
	return false
}
