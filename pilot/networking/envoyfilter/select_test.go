package envoyfilter_test

import (
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
)

// addFilter is an EnvoyFilter appending an HTTP filter named name (Lua).
func addFilter(t *testing.T, ns, name, extra string) model.Config {
	return envoyFilter(t, ns, name, extra+`
configPatches:
- applyTo: HTTP_FILTER
  patch:
    operation: ADD
    value:
      name: `+name+`
      typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua}
`)
}

// added returns the HTTP filters the patches append to the outbound listener.
func addedFilters(t *testing.T, ps *envoyfilter.Patches) []string {
	t.Helper()
	l, ok := ps.Listener(envoyfilter.SidecarOutbound, outboundListener(t))
	if !ok {
		t.Fatal("removed")
	}
	return httpFilters(t, l, 0)[2:]
}

func TestSelection(t *testing.T) {
	var rec recorder
	cfgs := []model.Config{
		addFilter(t, root, "mesh-wide", ""),
		addFilter(t, root, "root-selected", "workloadSelector: {labels: {app: b}}"),
		addFilter(t, "default", "ns-wide", ""),
		addFilter(t, "default", "ns-selected", "workloadSelector: {labels: {app: a}}"),
		addFilter(t, "other", "other-ns", ""),
		addFilter(t, "default", "gw-target", "targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]"),
	}
	idx := envoyfilter.Compile(cfgs, root, rec.reporter())
	cases := []struct {
		name  string
		proxy *model.Proxy
		want  []string
	}{
		{"default app=a", sidecar("default", map[string]string{"app": "a"}), []string{"mesh-wide", "ns-selected", "ns-wide"}},
		{"default app=b", sidecar("default", map[string]string{"app": "b"}), []string{"mesh-wide", "root-selected", "ns-wide"}},
		{"other", sidecar("other", nil), []string{"mesh-wide", "other-ns"}},
		{"gateway API gateway", sidecar("default", map[string]string{"gateway.networking.k8s.io/gateway-name": "gw"}),
			[]string{"mesh-wide", "gw-target", "ns-wide"}},
		{"root namespace proxy", sidecar(root, map[string]string{"app": "b"}), []string{"mesh-wide", "root-selected"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eq(t, "applied filters", addedFilters(t, idx.For(tc.proxy)), tc.want)
		})
	}
}

// TestOrder: priority first, then root namespace before the workload's,
// then creation time, then name.
func TestOrder(t *testing.T) {
	var rec recorder
	at := func(c model.Config, minute int) model.Config {
		c.CreationTimestamp = time.Date(2026, 1, 1, 0, minute, 0, 0, time.UTC)
		return c
	}
	cfgs := []model.Config{
		at(addFilter(t, "default", "a-late", ""), 9),
		at(addFilter(t, "default", "b-early", ""), 1),
		at(addFilter(t, "default", "c-early", ""), 1),
		at(addFilter(t, "default", "first", "priority: -10"), 9),
		at(addFilter(t, "default", "last", "priority: 10"), 0),
		at(addFilter(t, root, "root", ""), 30),
	}
	ps := patchesFor(t, rec.reporter(), cfgs...)
	eq(t, "order", addedFilters(t, ps), []string{"first", "root", "b-early", "c-early", "a-late", "last"})
}

// TestKey: proxies with the same EnvoyFilters share a key; a new version
// or a different selection changes it; no patch, no key.
func TestKey(t *testing.T) {
	var rec recorder
	f := addFilter(t, "default", "f", "workloadSelector: {labels: {app: a}}")
	idx := envoyfilter.Compile([]model.Config{f}, root, rec.reporter())
	p1 := idx.For(sidecar("default", map[string]string{"app": "a", "pod": "1"}))
	p2 := idx.For(sidecar("default", map[string]string{"app": "a", "pod": "2"}))
	if p1.Key() == "" || p1.Key() != p2.Key() {
		t.Errorf("keys %q, %q: want equal, non-empty", p1.Key(), p2.Key())
	}
	if p := idx.For(sidecar("default", map[string]string{"app": "b"})); p != nil || p.Key() != "" {
		t.Errorf("unselected proxy got patches %q", p.Key())
	}
	f2 := f
	f2.ResourceVersion = "2"
	p3 := envoyfilter.Compile([]model.Config{f2}, root, rec.reporter()).For(sidecar("default", map[string]string{"app": "a"}))
	if p3.Key() == p1.Key() {
		t.Error("a new resourceVersion kept the key")
	}
	if k := p1.KeyFor(envoyfilter.SidecarOutbound, envoyfilter.RouteKinds()...); k != "" {
		t.Errorf("route key %q for HTTP_FILTER patches, want empty", k)
	}
}

// TestBrokenPatchesAreReportedAndSkipped: a value that does not parse, an
// unsupported operation or applyTo, and a patch whose result fails Envoy
// validation are each logged once (object and field named) and counted as
// errors; the other patches apply and the result stays valid.
func TestBrokenPatchesAreReportedAndSkipped(t *testing.T) {
	var rec recorder
	cfgs := []model.Config{
		envoyFilter(t, "default", "bad-value", `
configPatches:
- applyTo: HTTP_FILTER
  patch: {operation: ADD, value: {name: x, no_such_field: 1}}
- applyTo: CLUSTER
  patch: {operation: REPLACE, value: {name: c}}
- applyTo: BOOTSTRAP
  patch: {operation: MERGE, value: {}}
- applyTo: EXTENSION_CONFIG
  patch: {operation: MERGE, value: {name: e}}
`),
		envoyFilter(t, "default", "invalid-result", `
configPatches:
- applyTo: LISTENER
  patch: {operation: MERGE, value: {address: {socket_address: {address: 0.0.0.0, port_value: 70000}}}}
`),
		addFilter(t, "default", "good", ""),
	}
	ps := patchesFor(t, rec.reporter(), cfgs...)
	orig := outboundListener(t)
	for range 2 { // reported once
		l, ok := ps.Listener(envoyfilter.SidecarOutbound, orig)
		if !ok {
			t.Fatal("removed")
		}
		if err := l.ValidateAll(); err != nil {
			t.Fatalf("result not valid: %v", err)
		}
		if l.GetAddress().GetSocketAddress().GetPortValue() != 8080 {
			t.Errorf("invalid merge applied: %v", l.GetAddress())
		}
		eq(t, "added", httpFilters(t, l, 0)[2:], []string{"good"})
	}
	logs := rec.logText()
	for _, want := range []string{
		`envoyfilter=default/bad-value field=spec.configPatches[0].patch.value`, "no_such_field",
		`field=spec.configPatches[1].patch.operation`, "REPLACE is not supported for applyTo CLUSTER",
		`field=spec.configPatches[2].applyTo error="BOOTSTRAP`, `field=spec.configPatches[3].patch.operation error="MERGE is not supported for applyTo EXTENSION_CONFIG`,
		`envoyfilter=default/invalid-result field="spec.configPatches[0] (LISTENER MERGE)"`, "not valid Envoy config",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs, "level=WARN"); n != 5 {
		t.Errorf("%d warnings, want 5:\n%s", n, logs)
	}
	for name, want := range map[string]string{"default/bad-value": envoyfilter.StatusError, "default/invalid-result": envoyfilter.StatusError, "default/good": envoyfilter.StatusApplied} {
		if got := rec.status[name]; got != want {
			t.Errorf("status %s = %q, want %q", name, got, want)
		}
	}
	if !proto.Equal(orig, outboundListener(t)) {
		t.Error("input changed")
	}
}

// TestListenerAdd: LISTENER ADD creates a listener; an invalid one is
// reported and left out.
func TestListenerAdd(t *testing.T) {
	var rec recorder
	ps := patchesFor(t, rec.reporter(), envoyFilter(t, "default", "add", `
configPatches:
- applyTo: LISTENER
  match: {context: SIDECAR_OUTBOUND}
  patch:
    operation: ADD
    value:
      name: extra
      address: {socket_address: {address: 0.0.0.0, port_value: 7777}}
      filter_chains: [{filters: [{name: envoy.filters.network.tcp_proxy, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: x, cluster: x}}]}]
- applyTo: LISTENER
  patch: {operation: ADD, value: {name: broken, address: {socket_address: {address: 0.0.0.0, port_value: 99999}}}}
`))
	ls := ps.Listeners(envoyfilter.SidecarOutbound, []*listenerv3.Listener{outboundListener(t)})
	eq(t, "listeners", names(ls), []string{"0.0.0.0_8080", "extra"})
	if !strings.Contains(rec.logText(), "new listener: added value is not valid Envoy config") {
		t.Errorf("broken ADD not reported: %s", rec.logText())
	}
}
