package listener_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

var discard = slog.New(slog.DiscardHandler)

func build(t *testing.T, in nt.Input, proxy *model.Proxy) map[string]*listenerv3.Listener {
	t.Helper()
	ls, err := listener.Build(proxy, in.PushContext(), discard)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*listenerv3.Listener{}
	for i, l := range ls {
		nt.ValidateRecursively(t, l)
		if i > 0 && ls[i-1].Name >= l.Name {
			t.Errorf("listeners not sorted or duplicated: %q then %q", ls[i-1].Name, l.Name)
		}
		out[l.Name] = l
	}
	return out
}

func tcpProxy(t *testing.T, f *listenerv3.Filter) *tcpv3.TcpProxy {
	t.Helper()
	var tp tcpv3.TcpProxy
	if f.GetName() != wellknown.TCPProxy {
		t.Fatalf("filter %q, want tcp_proxy", f.GetName())
	}
	if err := f.GetTypedConfig().UnmarshalTo(&tp); err != nil {
		t.Fatal(err)
	}
	return &tp
}

func hcm(t *testing.T, f *listenerv3.Filter) *hcmv3.HttpConnectionManager {
	t.Helper()
	var h hcmv3.HttpConnectionManager
	if f.GetName() != wellknown.HTTPConnectionManager {
		t.Fatalf("filter %q, want http_connection_manager", f.GetName())
	}
	if err := f.GetTypedConfig().UnmarshalTo(&h); err != nil {
		t.Fatal(err)
	}
	return &h
}

func TestBuildStandard(t *testing.T) {
	proxy := nt.Proxy(nt.StandardProxy, "reviews-v1", "default", map[string]string{"app": "reviews"})
	got := build(t, nt.Standard(), proxy)
	var names []string
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"0.0.0.0_27017", "0.0.0.0_7070", "0.0.0.0_80", "0.0.0.0_9080", "10.0.0.12_3306", "virtualInbound", "virtualOutbound"}
	if !slices.Equal(names, want) {
		t.Fatalf("listeners %v, want %v", names, want)
	}

	vo := got[listener.VirtualOutbound]
	if vo.GetAddress().GetSocketAddress().GetPortValue() != 15001 || !vo.GetUseOriginalDst().GetValue() || vo.GetBindToPort() != nil {
		t.Errorf("virtualOutbound %v", vo)
	}
	catchAll := vo.GetFilterChains()[len(vo.GetFilterChains())-1]
	if tp := tcpProxy(t, nt.MainFilter(catchAll)); tp.GetCluster() != "PassthroughCluster" || tp.GetStatPrefix() != "PassthroughCluster" {
		t.Errorf("virtualOutbound catch-all %v", tp)
	}

	vi := got[listener.VirtualInbound]
	if vi.GetAddress().GetSocketAddress().GetPortValue() != 15006 || !vi.GetUseOriginalDst().GetValue() ||
		vi.GetListenerFilters()[0].GetName() != wellknown.OriginalDestination {
		t.Errorf("virtualInbound %v", vi)
	}
	var inbound *listenerv3.FilterChain
	for _, fc := range vi.GetFilterChains() {
		if fc.GetFilterChainMatch().GetDestinationPort().GetValue() == 9081 {
			inbound = fc
		}
	}
	if inbound == nil {
		t.Fatalf("virtualInbound has no chain for target port 9081: %v", vi.GetFilterChains())
	}
	ih := hcm(t, nt.MainFilter(inbound))
	if r := ih.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0]; r.GetRoute().GetCluster() != "inbound|9081||" {
		t.Errorf("inbound route %v", r)
	}
	// What no port claims passes through, by istiod's chains (PERMISSIVE):
	// HTTP (Istio mTLS, plaintext) through a connection manager, the rest
	// (Istio mTLS TCP, plaintext, other TLS) through tcp_proxy.
	if vi.GetDefaultFilterChain() != nil {
		t.Errorf("virtualInbound has a default chain: %v", vi.GetDefaultFilterChain())
	}
	var pass []string
	for _, fc := range vi.GetFilterChains() {
		if fc.GetFilterChainMatch().GetDestinationPort() != nil {
			continue
		}
		m := fc.GetFilterChainMatch()
		desc := fc.GetName() + " " + m.GetTransportProtocol() + " " + strings.Join(m.GetApplicationProtocols(), ",")
		if h := nt.MainFilter(fc); h.GetName() == wellknown.HTTPConnectionManager {
			if c := hcm(t, h).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); c != "InboundPassthroughCluster" {
				t.Errorf("%s routes to %s", desc, c)
			}
		} else if c := tcpProxy(t, h).GetCluster(); c != "InboundPassthroughCluster" {
			t.Errorf("%s proxies to %s", desc, c)
		}
		if (fc.GetTransportSocket() != nil) != (m.GetTransportProtocol() == "tls" && len(m.GetApplicationProtocols()) > 0) {
			t.Errorf("%s: mTLS %v", desc, fc.GetTransportSocket() != nil)
		}
		pass = append(pass, desc)
	}
	wantPass := []string{
		"virtualInbound-catchall-http tls istio-http/1.0,istio-http/1.1,istio-h2",
		"virtualInbound-catchall-http raw_buffer http/1.1,h2c",
		"virtualInbound tls istio-peer-exchange,istio",
		"virtualInbound raw_buffer ",
		"virtualInbound tls ",
	}
	if !slices.Equal(pass, wantPass) {
		t.Errorf("passthrough chains\n%q\nwant\n%q", pass, wantPass)
	}
	if names := listenerFilterNames(vi); !slices.Equal(names, []string{wellknown.OriginalDestination, wellknown.TlsInspector, wellknown.HTTPInspector}) {
		t.Errorf("virtualInbound listener filters %q", names)
	}

	http := got["0.0.0.0_9080"]
	if http.GetBindToPort().GetValue() || http.GetBindToPort() == nil || http.GetTrafficDirection().String() != "OUTBOUND" {
		t.Errorf("0.0.0.0_9080 bind_to_port %v direction %v", http.GetBindToPort(), http.GetTrafficDirection())
	}
	h := hcm(t, nt.MainFilter(http.GetFilterChains()[0]))
	if h.GetRds().GetRouteConfigName() != "9080" || h.GetRds().GetConfigSource().GetAds() == nil || h.GetStatPrefix() != "outbound_0.0.0.0_9080" {
		t.Errorf("0.0.0.0_9080 hcm %v", h)
	}
	var router routerv3.Router
	if hf := nt.WithoutTelemetry(h.GetHttpFilters()); len(hf) != 4 || hf[0].GetName() != listener.ALPNFilterName || hf[1].GetName() != wellknown.Fault ||
		hf[2].GetName() != wellknown.CORS || hf[3].GetName() != wellknown.Router || hf[3].GetTypedConfig().UnmarshalTo(&router) != nil {
		t.Errorf("http filters %v", hf)
	}
	// Plaintext HTTP, told by http_inspector, to the connection manager;
	// anything else passes through.
	if m := http.GetFilterChains()[0].GetFilterChainMatch(); m.GetTransportProtocol() != "raw_buffer" ||
		!slices.Equal(m.GetApplicationProtocols(), []string{"http/1.1", "h2c"}) {
		t.Errorf("0.0.0.0_9080 chain match %v", m)
	}
	if lf := http.GetListenerFilters(); len(lf) != 1 || lf[0].GetName() != wellknown.HTTPInspector {
		t.Errorf("0.0.0.0_9080 listener filters %v", lf)
	}
	if d := http.GetDefaultFilterChain(); d.GetName() != "PassthroughFilterChain" || tcpProxy(t, d.GetFilters()[0]).GetCluster() != "PassthroughCluster" {
		t.Errorf("0.0.0.0_9080 default chain %v", d)
	}

	mysql := got["10.0.0.12_3306"]
	if sa := mysql.GetAddress().GetSocketAddress(); sa.GetAddress() != nt.MySQLVIP || sa.GetPortValue() != 3306 {
		t.Errorf("mysql address %v", sa)
	}
	if tp := tcpProxy(t, nt.MainFilter(mysql.GetFilterChains()[0])); tp.GetCluster() != "outbound|3306||"+nt.MySQLHost {
		t.Errorf("mysql tcp_proxy %v", tp)
	}
	if tp := tcpProxy(t, nt.MainFilter(got["0.0.0.0_27017"].GetFilterChains()[0])); tp.GetCluster() != "outbound|27017||"+nt.MongoExtHost {
		t.Errorf("mongo tcp_proxy %v", tp)
	}
	for name, l := range got {
		if name != listener.VirtualInbound && name != listener.VirtualOutbound && (l.GetBindToPort() == nil || l.GetBindToPort().GetValue()) {
			t.Errorf("%s binds to its port", name)
		}
	}
}

func TestRegistryOnlyAndConflicts(t *testing.T) {
	in := nt.Standard()
	in.Mesh = &meshconfig.MeshConfig{OutboundTrafficPolicy: &meshconfig.MeshConfig_OutboundTrafficPolicy{Mode: meshconfig.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY}}
	// A VIP-less TCP service on the HTTP port 9080 and two on 27017.
	in.Services = append(in.Services,
		&model.Service{Hostname: "a.example.com", Namespace: "default", Resolution: model.DNSLB,
			Ports: []model.Port{{Name: "tcp", Port: 9080, Protocol: model.ProtocolTCP}}},
		&model.Service{Hostname: "z.example.com", Namespace: "default", Resolution: model.DNSLB,
			Ports: []model.Port{{Name: "tcp", Port: 27017, Protocol: model.ProtocolTCP}}},
	)
	got := build(t, in, nt.Proxy("10.9.9.9", "client", "default", nil))
	vo := got[listener.VirtualOutbound]
	catchAll := vo.GetFilterChains()[len(vo.GetFilterChains())-1]
	if tp := tcpProxy(t, nt.MainFilter(catchAll)); tp.GetCluster() != "BlackHoleCluster" {
		t.Errorf("REGISTRY_ONLY catch-all %v", tp)
	}
	if nt.MainFilter(got["0.0.0.0_9080"].GetFilterChains()[0]).GetName() != wellknown.HTTPConnectionManager {
		t.Errorf("HTTP listener lost port 9080 to a TCP service")
	}
	if tp := tcpProxy(t, nt.MainFilter(got["0.0.0.0_27017"].GetFilterChains()[0])); tp.GetCluster() != "outbound|27017||"+nt.MongoExtHost {
		t.Errorf("0.0.0.0_27017 went to %s, want the first service by hostname", tp.GetCluster())
	}
	for _, fc := range got[listener.VirtualInbound].GetFilterChains() {
		if p := fc.GetFilterChainMatch().GetDestinationPort().GetValue(); p != 0 && p != listener.VirtualInboundPort {
			t.Errorf("non-endpoint proxy has inbound chain %s for port %d", fc.GetName(), p)
		}
	}
}

func TestGenerator(t *testing.T) {
	res, err := listener.Generator{}.Generate(nt.Proxy(nt.StandardProxy, "r", "default", nil), nt.Standard().PushContext(),
		&model.WatchedResource{TypeURL: model.ListenerType, Wildcard: true}, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 7 {
		t.Errorf("got %d listeners, want 7", len(res))
	}
	for _, r := range res {
		var l listenerv3.Listener
		if err := r.GetResource().UnmarshalTo(&l); err != nil || l.GetName() != r.GetName() {
			t.Fatalf("%s: %v", r.GetName(), err)
		}
		nt.ValidateRecursively(t, &l)
	}
}

func TestInboundTCP(t *testing.T) {
	got := build(t, nt.Standard(), nt.Proxy("10.2.0.1", "mysql-0", "db", map[string]string{"app": "mysql"}))
	var chain *listenerv3.FilterChain
	for _, fc := range got[listener.VirtualInbound].GetFilterChains() {
		if fc.GetFilterChainMatch().GetDestinationPort().GetValue() == 3306 {
			chain = fc
		}
	}
	if chain == nil {
		t.Fatalf("no inbound chain for 3306")
	}
	if tp := tcpProxy(t, nt.MainFilter(chain)); tp.GetCluster() != "inbound|3306||" || tp.GetStatPrefix() != "inbound|3306||" {
		t.Errorf("inbound tcp_proxy %v", tp)
	}
}

func listenerFilterNames(l *listenerv3.Listener) []string {
	var out []string
	for _, f := range l.GetListenerFilters() {
		out = append(out, f.GetName())
	}
	return out
}
