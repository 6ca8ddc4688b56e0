package networkingtest_test

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// efLog collects the EnvoyFilter warnings and statuses of the generators.
type efLog struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	status map[string]string
}

func (e *efLog) Write(p []byte) (int, error) { e.mu.Lock(); defer e.mu.Unlock(); return e.buf.Write(p) }

func (e *efLog) reporter() envoyfilter.Reporter {
	e.status = map[string]string{}
	return envoyfilter.Reporter{Log: slog.New(slog.NewTextHandler(e, nil)), Status: func(name, status string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.status[name] = status
	}}
}

func (e *efLog) String() string { e.mu.Lock(); defer e.mu.Unlock(); return e.buf.String() }

// envoyFilters loads a shared EnvoyFilter fixture (objects without a
// namespace go to the root namespace).
func envoyFilters(t *testing.T, file string) []model.Config {
	t.Helper()
	return nt.LoadConfigs(t, fixtures.Shared(t, "envoyfilter/"+file), "istio-system")
}

// efSnapshot is the CDS, LDS and RDS a proxy gets, decoded and validated.
type efSnapshot struct {
	clusters  map[string]*clusterv3.Cluster
	listeners map[string]*listenerv3.Listener
	routes    map[string]*routev3.RouteConfiguration
}

func generateWithFilters(t *testing.T, proxy *model.Proxy, push *model.PushContext, rep envoyfilter.Reporter) efSnapshot {
	t.Helper()
	full := &model.PushRequest{Full: true}
	var lds, rds model.Generator = listener.Generator{EnvoyFilters: rep}, route.Generator{EnvoyFilters: rep}
	if proxy.Type == model.Router {
		lds, rds = gateway.ListenerGenerator{EnvoyFilters: rep}, gateway.RouteGenerator{EnvoyFilters: rep}
	}
	var s efSnapshot
	res, err := cluster.Generator{EnvoyFilters: rep}.Generate(proxy, push, &model.WatchedResource{TypeURL: model.ClusterType, Wildcard: true}, full)
	if err != nil {
		t.Fatal(err)
	}
	s.clusters = decode(t, res, func() *clusterv3.Cluster { return &clusterv3.Cluster{} })
	if res, err = lds.Generate(proxy, push, &model.WatchedResource{TypeURL: model.ListenerType, Wildcard: true}, full); err != nil {
		t.Fatal(err)
	}
	s.listeners = decode(t, res, func() *listenerv3.Listener { return &listenerv3.Listener{} })
	var names []string
	for _, l := range s.listeners {
		for _, h := range connManagers(t, l) {
			if n := h.GetRds().GetRouteConfigName(); n != "" {
				names = append(names, n)
			}
		}
	}
	if res, err = rds.Generate(proxy, push, watch(model.RouteType, names), full); err != nil {
		t.Fatal(err)
	}
	s.routes = decode(t, res, func() *routev3.RouteConfiguration { return &routev3.RouteConfiguration{} })
	return s
}

// connManagers returns the HTTP connection managers of l, by chain.
func connManagers(t *testing.T, l *listenerv3.Listener) map[string]*hcmv3.HttpConnectionManager {
	t.Helper()
	out := map[string]*hcmv3.HttpConnectionManager{}
	for i, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			h := &hcmv3.HttpConnectionManager{}
			if f.GetName() == "envoy.filters.network.http_connection_manager" {
				if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
					t.Fatal(err)
				}
				out[fc.GetName()+"#"+string(rune('0'+i))] = h
			}
		}
	}
	return out
}

// before reports whether a comes right before b in list.
func before(list []string, a, b string) bool {
	i := slices.Index(list, a)
	return i >= 0 && i+1 < len(list) && list[i+1] == b
}

// TestLuaFixture: Istio's Lua EnvoyFilter (istio-system, selecting
// app=envoyfilter-test-app, any context) puts envoy.lua right before the
// router in every HTTP connection manager of that workload, inbound and
// outbound, and nowhere else.
func TestLuaFixture(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, envoyFilters(t, "lua-and-mtls-configs.yaml")...)
	push := in.PushContext()
	var log efLog
	proxy := nt.Proxy(nt.BookinfoPods["productpage-v1"], "productpage-v1-pod", "default",
		map[string]string{"app": "envoyfilter-test-app"})
	s := generateWithFilters(t, proxy, push, log.reporter())
	n := 0
	for name, l := range s.listeners {
		for chain, h := range connManagers(t, l) {
			n++
			if fs := nt.HTTPFilterNames(h); !before(fs, "envoy.lua", "envoy.filters.http.router") {
				t.Errorf("%s %s: http filters %q", name, chain, fs)
			}
		}
	}
	if n < 2 {
		t.Errorf("only %d connection managers", n)
	}
	if log.status["istio-system/test-lua"] != envoyfilter.StatusApplied || strings.Contains(log.String(), "WARN") {
		t.Errorf("status %v, log %s", log.status, log.String())
	}
	// Another workload is left alone.
	other := generateWithFilters(t, nt.BookinfoProxy("reviews-v1"), push, log.reporter())
	for name, l := range other.listeners {
		for chain, h := range connManagers(t, l) {
			if slices.Contains(nt.HTTPFilterNames(h), "envoy.lua") {
				t.Errorf("reviews-v1 %s %s got the Lua filter", name, chain)
			}
		}
	}
}

// TestLocalRateLimitFixture: the sample local rate limit on productpage
// inserts local_ratelimit (a TypedStruct) first in the inbound connection
// managers only, and its HTTP_ROUTE MERGE adds rate_limits and the
// per-route config to the inbound route of the port it names.
func TestLocalRateLimitFixture(t *testing.T) {
	cfgs := envoyFilters(t, "local-rate-limit-service.yaml")
	// The sample names port 8000; Bookinfo's productpage serves 9080.
	cfgs[0].Spec = proto.Clone(cfgs[0].Spec)
	cfgs[0].Spec.(*networking.EnvoyFilter).ConfigPatches[1].Match.GetRouteConfiguration().Vhost.Name = "inbound|http|9080"
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, cfgs...)
	var log efLog
	s := generateWithFilters(t, nt.BookinfoProxy("productpage-v1"), in.PushContext(), log.reporter())
	inbound, patchedRoutes := 0, 0
	for name, l := range s.listeners {
		for chain, h := range connManagers(t, l) {
			fs := nt.HTTPFilterNames(h)
			has := len(fs) > 0 && fs[0] == "envoy.filters.http.local_ratelimit"
			if name == "virtualInbound" {
				inbound++
				if !has {
					t.Errorf("%s %s: http filters %q", name, chain, fs)
				}
				for _, vh := range h.GetRouteConfig().GetVirtualHosts() {
					if vh.GetName() != "inbound|http|9080" {
						continue // the passthrough chains' inbound|http|0: not matched
					}
					patchedRoutes++
					for _, r := range vh.GetRoutes() {
						if len(r.GetRoute().GetRateLimits()) != 2 || r.GetTypedPerFilterConfig()["envoy.filters.http.local_ratelimit"] == nil {
							t.Errorf("%s route %s: rate limits %v, per-filter %v", vh.GetName(), r.GetName(), r.GetRoute().GetRateLimits(), r.GetTypedPerFilterConfig())
						}
					}
				}
			} else if has {
				t.Errorf("outbound %s %s got the inbound filter", name, chain)
			}
		}
	}
	if inbound == 0 || patchedRoutes == 0 {
		t.Errorf("%d inbound connection managers, %d with inbound|http|9080", inbound, patchedRoutes)
	}
	if strings.Contains(log.String(), "WARN") {
		t.Errorf("warnings: %s", log.String())
	}
}

// TestGatewayRateLimitFixture: Bookinfo's global rate limit sample on the
// ingress gateway: envoy.ratelimit before the router, rate_limit_cluster
// added to CDS, rate_limits merged into every virtual host.
func TestGatewayRateLimitFixture(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, nt.LoadConfigs(t, "bookinfo-networking/bookinfo-gateway.yaml", "default")...)
	in.Configs = append(in.Configs, envoyFilters(t, "productpage_envoy_ratelimit.yaml")...)
	push := in.PushContext()
	var log efLog
	gw := &model.Proxy{ID: "router~10.244.1.1~ingress-0.istio-system~istio-system.svc.cluster.local", Type: model.Router,
		IPAddresses: []string{"10.244.1.1"}, Namespace: "istio-system",
		Metadata: model.NodeMetadata{Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"}}}
	s := generateWithFilters(t, gw, push, log.reporter())
	hcms := 0
	for name, l := range s.listeners {
		for chain, h := range connManagers(t, l) {
			hcms++
			fs := nt.HTTPFilterNames(h)
			if !before(fs, "envoy.ratelimit", "envoy.filters.http.router") {
				t.Errorf("%s %s: http filters %q", name, chain, fs)
				continue
			}
			rl := &ratelimitv3.RateLimit{}
			if err := h.GetHttpFilters()[slices.Index(fs, "envoy.ratelimit")].GetTypedConfig().UnmarshalTo(rl); err != nil ||
				rl.GetDomain() != "productpage-ratelimit" || !rl.GetFailureModeDeny() {
				t.Errorf("ratelimit config %v, %v", rl, err)
			}
		}
	}
	if hcms == 0 {
		t.Fatal("gateway has no HTTP listener")
	}
	c := s.clusters["rate_limit_cluster"]
	if c == nil || c.GetType() != clusterv3.Cluster_STRICT_DNS || c.GetLoadAssignment().GetClusterName() != "rate_limit_cluster" {
		t.Errorf("rate_limit_cluster = %v", c)
	}
	if len(s.routes) == 0 {
		t.Fatal("no routes")
	}
	for name, rc := range s.routes {
		for _, vh := range rc.GetVirtualHosts() {
			if len(vh.GetRateLimits()) != 1 || vh.GetRateLimits()[0].GetActions()[0].GetRequestHeaders().GetHeaderName() != ":path" {
				t.Errorf("%s %s rate limits = %v", name, vh.GetName(), vh.GetRateLimits())
			}
		}
	}
	for _, f := range []string{"istio-system/filter-ratelimit", "istio-system/filter-ratelimit-svc"} {
		if log.status[f] != envoyfilter.StatusApplied {
			t.Errorf("status of %s = %q", f, log.status[f])
		}
	}
	// Sidecars are not selected.
	side := generateWithFilters(t, nt.BookinfoProxy("productpage-v1"), push, log.reporter())
	if side.clusters["rate_limit_cluster"] != nil {
		t.Error("sidecar got rate_limit_cluster")
	}
}

// TestValidationFixtures: the objects of Istio's validation fixtures apply
// (or, for WAYPOINT patches, are left out) without producing invalid
// config.
func TestValidationFixtures(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, envoyFilters(t, "validation-valid.yaml")...)
	in.Configs = append(in.Configs, envoyFilters(t, "validation-invalid.yaml")...)
	in.Configs = append(in.Configs, envoyFilters(t, "enable_envoy_local_ratelimit_per_route.yaml")...)
	var log efLog
	s := generateWithFilters(t, nt.BookinfoProxy("productpage-v1"), in.PushContext(), log.reporter())
	for name, l := range s.listeners {
		for chain, h := range connManagers(t, l) {
			if fs := nt.HTTPFilterNames(h); len(fs) == 0 || fs[0] != "envoy.filters.http.ext_proc" {
				t.Errorf("%s %s: http filters %q, want ext_proc first", name, chain, fs)
			}
		}
	}
	if s.clusters["lua_cluster"] == nil {
		t.Error("lua_cluster not added")
	}
	// MERGE_AND_REPLACE_LIST sets websocket upgrades on the connection
	// managers of TLS chains (virtualInbound's mTLS ones) and on no others;
	// the filters of other types there (tcp_proxy, metadata exchange) are
	// left alone.
	tlsHCMs := 0
	for name, l := range s.listeners {
		for _, fc := range append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain()) {
			tls := fc.GetFilterChainMatch().GetTransportProtocol() == "tls"
			for _, f := range fc.GetFilters() {
				if f.GetName() != wellknown.HTTPConnectionManager {
					continue
				}
				h := &hcmv3.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
					t.Fatal(err)
				}
				ws := len(h.GetUpgradeConfigs()) == 1 && h.GetUpgradeConfigs()[0].GetUpgradeType() == "websocket"
				if ws != tls {
					t.Errorf("%s chain %s (tls %v): upgrade configs %v", name, fc.GetName(), tls, h.GetUpgradeConfigs())
				}
				if tls {
					tlsHCMs++
				}
			}
		}
	}
	if tlsHCMs == 0 {
		t.Error("no TLS chain with a connection manager: the MERGE_AND_REPLACE_LIST fixture was not exercised")
	}
	if strings.Contains(log.String(), "envoyfilter=istio-system/merge-and-replace-list") {
		t.Errorf("MERGE_AND_REPLACE_LIST reported: %s", log.String())
	}
}
