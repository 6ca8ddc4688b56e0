package listener_test

import (
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/internal/golden"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
)

const (
	tlsListener = "0.0.0.0_443"
	bookinfoCom = "outbound|443||*.bookinfo.com"
	loginProd   = "outbound|443||login.prod.svc.cluster.local"
	reviewsProd = "outbound|443||reviews.prod.svc.cluster.local"
	ratingsV1   = "outbound|443|v1|ratings.prod.svc.cluster.local"
	ratingsV2   = "outbound|443|v2|ratings.prod.svc.cluster.local"
	// ratingsSubnets is the match key of the destinationSubnets route.
	ratingsSubnets = "ratings.bookinfo.com|10.10.0.0/16,10.20.0.1/32"
)

var update = flag.Bool("update", false, "rewrite testdata/out golden files and delete stale ones (make golden)")

// withServiceEntries adds the services of the ServiceEntries among configs.
func withServiceEntries(in nt.Input, configs []model.Config) nt.Input {
	for i := range configs {
		if configs[i].Kind == model.KindServiceEntry {
			in.Services = append(in.Services, serviceentry.Convert(&configs[i], nt.DefaultDomain)...)
		}
	}
	return in
}

// bookinfoSNI is Bookinfo with testdata/tls-sni.yaml's ServiceEntry and
// the VirtualServices named vs.
func bookinfoSNI(t *testing.T, vs ...string) nt.Input {
	t.Helper()
	in := nt.Bookinfo(t)
	cfgs := nt.LoadConfigs(t, mustAbs(t, "testdata/tls-sni.yaml"), "default")
	in = withServiceEntries(in, cfgs)
	for _, c := range cfgs {
		if c.Kind == model.KindVirtualService && slices.Contains(vs, c.Name) {
			in.Configs = append(in.Configs, c)
		}
	}
	return in
}

// sniChains maps each filter chain of l by its match ("SNI,...|PREFIX,...")
// to its destination weights; the default filter chain is under "default".
func sniChains(t *testing.T, l *listenerv3.Listener) map[string]weights {
	t.Helper()
	out := map[string]weights{}
	add := func(key string, fc *listenerv3.FilterChain) {
		if _, dup := out[key]; dup {
			t.Errorf("%s: two filter chains match %q", l.GetName(), key)
		}
		if len(fc.GetFilters()) != 1 {
			t.Fatalf("%s: chain %q has filters %v, want one tcp_proxy", l.GetName(), key, fc.GetFilters())
		}
		out[key] = chainWeights(t, tcpProxy(t, nt.MainFilter(fc)))
	}
	for _, fc := range l.GetFilterChains() {
		m := fc.GetFilterChainMatch()
		if m.GetDestinationPort() != nil || m.GetTransportProtocol() != "" || len(m.GetApplicationProtocols()) > 0 {
			t.Errorf("%s: chain match %v: want only server_names and prefix_ranges (the listener is per port, as in Istio)", l.GetName(), m)
		}
		var prefixes []string
		for _, r := range m.GetPrefixRanges() {
			prefixes = append(prefixes, fmt.Sprintf("%s/%d", r.GetAddressPrefix(), r.GetPrefixLen().GetValue()))
		}
		add(strings.Join(m.GetServerNames(), ",")+"|"+strings.Join(prefixes, ","), fc)
	}
	if d := l.GetDefaultFilterChain(); d != nil {
		if d.GetFilterChainMatch() != nil {
			t.Errorf("%s: default filter chain has a match %v", l.GetName(), d.GetFilterChainMatch())
		}
		add("default", d)
	}
	return out
}

func sameWeights(a, b weights) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func wantChains(t *testing.T, l *listenerv3.Listener, want map[string]weights) {
	t.Helper()
	got := sniChains(t, l)
	for k, w := range want {
		if !sameWeights(got[k], w) {
			t.Errorf("%s: chain %q goes to %v, want %v", l.GetName(), k, got[k], w)
		}
	}
	for k, w := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected chain %q to %v", l.GetName(), k, w)
		}
	}
}

// wantInspector checks the tls_inspector listener filter is there (and the
// ClientHello is awaited without a timeout) exactly when want.
func wantInspector(t *testing.T, l *listenerv3.Listener, want bool) {
	t.Helper()
	var names []string
	for _, f := range l.GetListenerFilters() {
		names = append(names, f.GetName())
	}
	if got := slices.Contains(names, wellknown.TLSInspector); got != want {
		t.Errorf("%s: listener filters %v, tls_inspector wanted: %v", l.GetName(), names, want)
	}
	if want && (l.GetListenerFiltersTimeout() == nil || l.GetListenerFiltersTimeout().AsDuration() != 0) {
		t.Errorf("%s: listener_filters_timeout %v, want 0s (Istio's outbound listeners)", l.GetName(), l.GetListenerFiltersTimeout())
	}
}

func tlsListenerOf(t *testing.T, ls map[string]*listenerv3.Listener, name string) *listenerv3.Listener {
	t.Helper()
	l := ls[name]
	if l == nil {
		var names []string
		for n := range ls {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Fatalf("no listener %s among %v", name, names)
	}
	if l.GetBindToPort().GetValue() || l.GetBindToPort() == nil {
		t.Errorf("%s: bind_to_port %v, want false (virtualOutbound hands connections over)", name, l.GetBindToPort())
	}
	return l
}

// The reference example bound to mygateway only does not reach sidecars:
// the ServiceEntry's port keeps Istio's default, its host as SNI to its own
// cluster, and what else comes to 0.0.0.0:443 passes through.
func TestTLSRouteGatewayOnlyNotOnSidecars(t *testing.T) {
	l := tlsListenerOf(t, build(t, bookinfoSNI(t, "bookinfo-sni"), nt.BookinfoProxy("productpage-v1")), tlsListener)
	wantChains(t, l, map[string]weights{
		"*.bookinfo.com|": {bookinfoCom: 100},
		"default":         {clustername.Passthrough: 100},
	})
	wantInspector(t, l, true)
	if got := l.GetDefaultFilterChain().GetName(); got != listener.PassthroughFilterChain {
		t.Errorf("default filter chain %q, want %q", got, listener.PassthroughFilterChain)
	}
}

// The reference example bound to mesh: one chain per SNI match that applies
// to the client, weighted where the route splits, destination subnets as
// prefix ranges; sourceLabels and match-level gateways decide per client.
func TestTLSRouteSNIMatch(t *testing.T) {
	common := map[string]weights{
		"login.bookinfo.com|":   {loginProd: 100},
		"reviews.bookinfo.com|": {reviewsProd: 100},
		ratingsSubnets:          {ratingsV1: 80, ratingsV2: 20},
		"default":               {clustername.Passthrough: 100},
	}
	withReviewsRoute := map[string]weights{"ratings.bookinfo.com|": {ratingsV2: 100}}
	for k, v := range common {
		withReviewsRoute[k] = v
	}
	for _, tc := range []struct {
		workload string
		want     map[string]weights
	}{
		{"productpage-v1", common},
		// sourceLabels app: reviews applies to every reviews version.
		{"reviews-v1", withReviewsRoute},
		{"reviews-v3", withReviewsRoute},
	} {
		t.Run(tc.workload, func(t *testing.T) {
			l := tlsListenerOf(t, build(t, bookinfoSNI(t, "bookinfo-sni", "bookinfo-sni-mesh"), nt.BookinfoProxy(tc.workload)), tlsListener)
			wantChains(t, l, tc.want)
			wantInspector(t, l, true)
		})
	}
}

// Under REGISTRY_ONLY what no chain claims is dropped, as virtualOutbound
// would.
func TestTLSRouteRegistryOnly(t *testing.T) {
	in := bookinfoSNI(t, "bookinfo-sni-mesh")
	in.Mesh = &meshconfig.MeshConfig{OutboundTrafficPolicy: &meshconfig.MeshConfig_OutboundTrafficPolicy{Mode: meshconfig.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY}}
	l := tlsListenerOf(t, build(t, in, nt.BookinfoProxy("productpage-v1")), tlsListener)
	if got := sniChains(t, l)["default"]; !sameWeights(got, weights{clustername.BlackHole: 100}) {
		t.Errorf("default chain to %v, want BlackHoleCluster", got)
	}
}

// Services without a VIP share 0.0.0.0_443 by SNI: each external TLS or
// HTTPS ServiceEntry adds its own chain, next to the tls routes of others.
func TestTLSRouteSharedWildcardListener(t *testing.T) {
	in := bookinfoSNI(t, "bookinfo-sni-mesh")
	in = withServiceEntries(in, nt.LoadConfigs(t, "bookinfo-networking/egress-rule-google-apis.yaml", "default"))
	in = withServiceEntries(in, []model.Config{{
		Meta: model.Meta{Kind: model.KindServiceEntry, Name: "example", Namespace: "default"},
		Spec: &networking.ServiceEntry{
			Hosts:      []string{"api.example.com"},
			Location:   networking.ServiceEntry_MESH_EXTERNAL,
			Ports:      []*networking.ServicePort{{Number: 443, Name: "https", Protocol: "HTTPS"}},
			Resolution: networking.ServiceEntry_NONE,
		},
	}})
	l := tlsListenerOf(t, build(t, in, nt.BookinfoProxy("productpage-v1")), tlsListener)
	wantChains(t, l, map[string]weights{
		"login.bookinfo.com|":   {loginProd: 100},
		"reviews.bookinfo.com|": {reviewsProd: 100},
		ratingsSubnets:          {ratingsV1: 80, ratingsV2: 20},
		"api.example.com|":      {"outbound|443||api.example.com": 100},
		"www.googleapis.com|":   {"outbound|443||www.googleapis.com": 100},
		"default":               {clustername.Passthrough: 100},
	})
}

// secureService is an HTTPS Kubernetes service with a VIP.
func secureService() *model.Service {
	return nt.KubeService("secure", "default", "10.96.0.50", model.Port{Name: "https", Port: 8443})
}

func secureVS(sni ...string) model.Config {
	return model.Config{
		Meta: model.Meta{Kind: model.KindVirtualService, Name: "secure", Namespace: "default"},
		Spec: &networking.VirtualService{
			Hosts: []string{"secure"},
			Tls: []*networking.TLSRoute{{
				Match: []*networking.TLSMatchAttributes{{SniHosts: sni}},
				Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "secure", Subset: "v1"}}},
			}},
		},
	}
}

// An HTTPS service with a VIP has its own listener: without tls routes one
// chain to its cluster, with no SNI match (the VIP says the destination);
// with them, their SNI chains and a passthrough default. A route whose SNI
// falls outside the VirtualService's hosts is ignored.
func TestTLSRouteServiceVIP(t *testing.T) {
	const (
		name = "10.96.0.50_8443"
		host = "secure.default.svc.cluster.local"
		all  = "outbound|8443||" + host
		v1   = "outbound|8443|v1|" + host
	)
	for _, tc := range []struct {
		name      string
		configs   []model.Config
		want      map[string]weights
		inspector bool
	}{
		{"no virtual service", nil, map[string]weights{"|": {all: 100}}, false},
		{"sni route", []model.Config{secureVS(host)}, map[string]weights{host + "|": {v1: 100}, "default": {clustername.Passthrough: 100}}, true},
		{"sni outside the hosts", []model.Config{secureVS("other.example.com")}, map[string]weights{"|": {all: 100}}, false},
		{"sni *", []model.Config{func() model.Config {
			c := secureVS("*")
			c.Spec.(*networking.VirtualService).Hosts = []string{"*"}
			return c
		}()}, map[string]weights{"|": {v1: 100}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := nt.Input{Services: []*model.Service{secureService()}, Configs: tc.configs}
			l := tlsListenerOf(t, build(t, in, nt.Proxy("10.244.0.9", "client", "default", map[string]string{"app": "client"})), name)
			wantChains(t, l, tc.want)
			wantInspector(t, l, tc.inspector)
		})
	}
}

// The cached generator keeps the listeners of clients whose tls routes
// differ (sourceLabels) apart, and every listener passes ValidateAll.
func TestTLSRouteCachedPerRoutes(t *testing.T) {
	push := bookinfoSNI(t, "bookinfo-sni-mesh").PushContext()
	chains := func(workload string) map[string]weights {
		res, err := listener.Generator{}.Generate(nt.BookinfoProxy(workload), push, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var found *listenerv3.Listener
		for _, r := range res {
			var l listenerv3.Listener
			if err := r.GetResource().UnmarshalTo(&l); err != nil {
				t.Fatal(err)
			}
			if err := nt.Validate(&l); err != nil {
				t.Errorf("%s: listener %s: %v", workload, l.GetName(), err)
			}
			if l.GetName() == tlsListener {
				found = &l
			}
		}
		if found == nil {
			t.Fatalf("%s: no listener %s", workload, tlsListener)
		}
		return sniChains(t, found)
	}
	for range 2 {
		if got := chains("reviews-v2"); !sameWeights(got["ratings.bookinfo.com|"], weights{ratingsV2: 100}) {
			t.Errorf("reviews-v2: ratings chain %v, want all to v2", got["ratings.bookinfo.com|"])
		}
		if got := chains("productpage-v1"); got["ratings.bookinfo.com|"] != nil {
			t.Errorf("productpage-v1: has the reviews-only ratings chain %v", got["ratings.bookinfo.com|"])
		}
	}
}

// The whole 0.0.0.0_443 listener of a reviews sidecar under the mesh-bound
// reference example, as a golden file. The test owns testdata/out: make
// golden (go test -update) rewrites it and deletes files it does not write.
func TestTLSRouteGolden(t *testing.T) {
	l := tlsListenerOf(t, build(t, bookinfoSNI(t, "bookinfo-sni", "bookinfo-sni-mesh"), nt.BookinfoProxy("reviews-v1")), tlsListener)
	golden.New(t, filepath.Join("testdata", "out"), *update).Messages(t, "tls-sni.reviews-v1.listener.yaml", l)
}

// A tls route the sidecar cannot apply is named in a warning, not dropped
// silently.
func TestTLSRouteWarnings(t *testing.T) {
	var buf testutil.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	in := nt.Input{Services: []*model.Service{secureService()}, Configs: []model.Config{secureVS("other.example.com")}}
	if _, err := listener.Build(nt.Proxy("10.244.0.9", "client", "default", nil), in.PushContext(), log); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tls route not applied", "default/secure", "tls[0].match[0].sniHosts", "other.example.com"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log %q lacks %q", buf.String(), want)
		}
	}
}

// An SNI name two routes match on the same subnets goes to the first: the
// second chain keeps only the names left, so no two chains share a match
// (Envoy would refuse the listener).
func TestTLSRouteOverlappingSNI(t *testing.T) {
	const host = "secure.default.svc.cluster.local"
	route := func(subset string, sni ...string) *networking.TLSRoute {
		return &networking.TLSRoute{
			Match: []*networking.TLSMatchAttributes{{SniHosts: sni}},
			Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "secure", Subset: subset}}},
		}
	}
	vs := model.Config{
		Meta: model.Meta{Kind: model.KindVirtualService, Name: "secure", Namespace: "default"},
		Spec: &networking.VirtualService{
			Hosts: []string{"secure", "*.example.com"},
			Tls: []*networking.TLSRoute{
				route("v1", "b.example.com", "a.example.com"),
				route("v2", "b.example.com", "c.example.com"),
				route("v3", "a.example.com"),
			},
		},
	}
	in := nt.Input{Services: []*model.Service{secureService()}, Configs: []model.Config{vs}}
	l := tlsListenerOf(t, build(t, in, nt.Proxy("10.244.0.9", "client", "default", nil)), "10.96.0.50_8443")
	wantChains(t, l, map[string]weights{
		"a.example.com,b.example.com|": {"outbound|8443|v1|" + host: 100},
		"c.example.com|":               {"outbound|8443|v2|" + host: 100},
		"default":                      {clustername.Passthrough: 100},
	})
}
