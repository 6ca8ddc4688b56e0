package gateway_test

import (
	"log/slog"
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

var discard = slog.New(slog.DiscardHandler)

func listenerNamed(t *testing.T, ls []*listenerv3.Listener, name string) *listenerv3.Listener {
	t.Helper()
	for _, l := range ls {
		if l.GetName() == name {
			return l
		}
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.GetName())
	}
	t.Fatalf("no listener %s among %v", name, names)
	return nil
}

func downstream(t *testing.T, fc *listenerv3.FilterChain) *tlsv3.DownstreamTlsContext {
	t.Helper()
	ctx := &tlsv3.DownstreamTlsContext{}
	if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatalf("chain %v: transport socket: %v", fc.GetFilterChainMatch(), err)
	}
	return ctx
}

func TestBookinfoGateway(t *testing.T) {
	push := bookinfoWith(t, "bookinfo-networking/bookinfo-gateway.yaml")
	ls, _ := build(t, push)
	if len(ls) != 1 {
		t.Fatalf("got %d listeners, want 1 (0.0.0.0_8080)", len(ls))
	}
	l := listenerNamed(t, ls, "0.0.0.0_8080")
	if got := l.GetAddress().GetSocketAddress().GetPortValue(); got != 8080 {
		t.Errorf("port %d, want 8080", got)
	}
	hcm := connManager(t, l.GetFilterChains()[0])
	if got := hcm.GetRds().GetRouteConfigName(); got != "http.8080" {
		t.Fatalf("RDS name %q, want http.8080", got)
	}
	if hcm.GetRds().GetConfigSource().GetAds() == nil {
		t.Error("RDS not from ADS")
	}
	rc := gateway.BuildRouteConfiguration(ingress(), push, "http.8080", discard)
	if len(rc.GetVirtualHosts()) != 1 || !slices.Equal(rc.GetVirtualHosts()[0].GetDomains(), []string{"*"}) {
		t.Fatalf("virtual hosts %v, want one with domain *", rc.GetVirtualHosts())
	}
	type m struct{ path, prefix string }
	var got []m
	for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
		got = append(got, m{r.GetMatch().GetPath(), r.GetMatch().GetPrefix()})
		if c := r.GetRoute().GetCluster(); c != "outbound|9080||productpage.default.svc.cluster.local" {
			t.Errorf("route %v to %q, want productpage's cluster", r.GetMatch(), c)
		}
	}
	want := []m{{path: "/productpage"}, {prefix: "/static"}, {path: "/login"}, {path: "/logout"}, {prefix: "/api/v1/products"}}
	if !slices.Equal(got, want) {
		t.Errorf("matches %v, want %v", got, want)
	}
}

func TestHTTPSSimpleCredential(t *testing.T) {
	push := bookinfoWith(t, mustAbs(t, "testdata/https-simple.yaml"))
	ls, _ := build(t, push)
	l := listenerNamed(t, ls, "0.0.0.0_8443")
	fc := l.GetFilterChains()[0]
	if got := fc.GetFilterChainMatch().GetServerNames(); !slices.Equal(got, []string{"bookinfo.example.com"}) {
		t.Errorf("server_names %v", got)
	}
	ctx := downstream(t, fc)
	sds := ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()
	if len(sds) != 1 || sds[0].GetName() != "kubernetes://bookinfo-cert" || sds[0].GetSdsConfig().GetAds() == nil {
		t.Fatalf("certificate SDS %v, want kubernetes://bookinfo-cert over ADS", sds)
	}
	if ctx.GetRequireClientCertificate().GetValue() {
		t.Error("SIMPLE requires a client certificate")
	}
	if l.GetListenerFilters()[0].GetName() != "envoy.filters.listener.tls_inspector" {
		t.Error("no tls_inspector")
	}
	if got := connManager(t, fc).GetRds().GetRouteConfigName(); got != "https.8443.https.bookinfo-https.istio-system" {
		t.Errorf("RDS %q", got)
	}
	// The HTTP server on 8080 redirects to HTTPS.
	rc := gateway.BuildRouteConfiguration(ingress(), push, "http.8080", discard)
	if vh := rc.GetVirtualHosts()[0]; vh.GetRequireTls() != routev3.VirtualHost_ALL {
		t.Errorf("httpsRedirect: require_tls %v", vh.GetRequireTls())
	}
	// Matches for other gateways (mesh) are not on the gateway.
	rc = gateway.BuildRouteConfiguration(ingress(), push, "https.8443.https.bookinfo-https.istio-system", discard)
	var prefixes []string
	for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
		prefixes = append(prefixes, r.GetMatch().GetPrefix()+r.GetMatch().GetPath())
	}
	if !slices.Equal(prefixes, []string{"/reviews", "/productpage"}) {
		t.Errorf("gateway routes %v, want /reviews and /productpage (not /mesh-only)", prefixes)
	}
}

func TestHTTPSMutual(t *testing.T) {
	push := bookinfoWith(t, mustAbs(t, "testdata/https-mutual.yaml"))
	ls, _ := build(t, push)
	l := listenerNamed(t, ls, "0.0.0.0_443")
	if len(l.GetFilterChains()) != 2 {
		t.Fatalf("got %d chains, want 2", len(l.GetFilterChains()))
	}
	ctx := downstream(t, l.GetFilterChains()[0])
	if !ctx.GetRequireClientCertificate().GetValue() {
		t.Error("MUTUAL without require_client_certificate")
	}
	cv := ctx.GetCommonTlsContext().GetCombinedValidationContext()
	if got := cv.GetValidationContextSdsSecretConfig().GetName(); got != "kubernetes://secure-cred-cacert" {
		t.Errorf("validation SDS %q, want kubernetes://secure-cred-cacert", got)
	}
	if cv.GetValidationContextSdsSecretConfig().GetSdsConfig().GetAds() == nil {
		t.Error("validation SDS not over ADS")
	}
	files := downstream(t, l.GetFilterChains()[1])
	if got := files.GetCommonTlsContext().GetTlsCertificates()[0].GetCertificateChain().GetFilename(); got != "/etc/certs/tls.crt" {
		t.Errorf("certificate file %q", got)
	}
	// A wildcard host keeps the port: Envoy allows one wildcard per domain.
	rc := gateway.BuildRouteConfiguration(ingress(), push, "https.15443.tls-mesh.mtls.istio-system", discard)
	if got := rc.GetVirtualHosts()[0].GetDomains(); !slices.Equal(got, []string{"*.mesh.example.com", "*.mesh.example.com:15443"}) {
		t.Errorf("wildcard host domains %v", got)
	}
	mesh := downstream(t, listenerNamed(t, ls, "0.0.0.0_15443").GetFilterChains()[0])
	sds := mesh.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0]
	if sds.GetName() != "default" || sds.GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-grpc" {
		t.Errorf("ISTIO_MUTUAL certificate %v, want default from sds-grpc", sds)
	}
}

func TestPassthrough(t *testing.T) {
	push := bookinfoWith(t, mustAbs(t, "testdata/passthrough.yaml"))
	ls, routes := build(t, push)
	if len(routes) != 0 {
		t.Errorf("passthrough has %d route configurations", len(routes))
	}
	l := listenerNamed(t, ls, "0.0.0.0_443")
	got := map[string]*tcpv3.TcpProxy{}
	for _, fc := range l.GetFilterChains() {
		tp := &tcpv3.TcpProxy{}
		if err := nt.MainFilter(fc).GetTypedConfig().UnmarshalTo(tp); err != nil {
			t.Fatal(err)
		}
		if fc.GetTransportSocket() != nil {
			t.Error("passthrough chain terminates TLS")
		}
		for _, n := range fc.GetFilterChainMatch().GetServerNames() {
			got[n] = tp
		}
	}
	if len(got) != 2 {
		t.Fatalf("SNI chains %v, want ratings.example.com and reviews.example.com (other.org is not a server host)", got)
	}
	if c := got["ratings.example.com"].GetCluster(); c != "outbound|9080||ratings.default.svc.cluster.local" {
		t.Errorf("ratings.example.com to %q", c)
	}
	if ws := got["reviews.example.com"].GetWeightedClusters().GetClusters(); len(ws) != 2 || ws[0].GetWeight() != 80 {
		t.Errorf("reviews.example.com weighted %v", ws)
	}
}

func TestOnlySelectedRouters(t *testing.T) {
	push := bookinfoWith(t, "bookinfo-networking/bookinfo-gateway.yaml")
	cases := map[string]*model.Proxy{
		"sidecar":        nt.BookinfoProxy("productpage-v1"),
		"other labels":   router("istio-system", map[string]string{"istio": "egressgateway"}),
		"no labels":      router("istio-system", nil),
		"partial labels": router("istio-system", map[string]string{"app": "x"}),
	}
	for name, p := range cases {
		if ls := gateway.BuildListeners(p, push, discard); len(ls) != 0 {
			t.Errorf("%s: got %d listeners, want none", name, len(ls))
		}
	}
	// A Gateway in another namespace selects a router in any namespace.
	if ls := gateway.BuildListeners(router("ingress", map[string]string{"istio": "ingressgateway", "x": "y"}), push, discard); len(ls) != 1 {
		t.Errorf("router in namespace ingress: got %d listeners, want 1", len(ls))
	}
}

func TestUnboundRouteAnswers404(t *testing.T) {
	in := nt.Bookinfo(t)
	for _, c := range nt.LoadConfigs(t, "bookinfo-networking/bookinfo-gateway.yaml", "default") {
		if c.Kind == model.KindGateway {
			in.Configs = append(in.Configs, c)
		}
	}
	rc := gateway.BuildRouteConfiguration(ingress(), in.PushContext(), "http.8080", discard)
	nt.ValidateRecursively(t, rc)
	if vh := rc.GetVirtualHosts(); len(vh) != 1 || vh[0].GetRoutes()[0].GetDirectResponse().GetStatus() != 404 {
		t.Errorf("virtual hosts %v, want one answering 404", vh)
	}
}

func TestGenerators(t *testing.T) {
	push := bookinfoWith(t, "bookinfo-networking/bookinfo-gateway.yaml")
	res, err := gateway.ListenerGenerator{}.Generate(ingress(), push, &model.WatchedResource{TypeURL: model.ListenerType, Wildcard: true}, nil)
	if err != nil || len(res) != 1 || res[0].GetName() != "0.0.0.0_8080" {
		t.Fatalf("router LDS: %v %v", res, err)
	}
	w := &model.WatchedResource{TypeURL: model.RouteType, ResourceNames: map[string]struct{}{"http.8080": {}}}
	res, err = gateway.RouteGenerator{}.Generate(ingress(), push, w, nil)
	if err != nil || len(res) != 1 || res[0].GetName() != "http.8080" {
		t.Fatalf("router RDS: %v %v", res, err)
	}
	rc := &routev3.RouteConfiguration{}
	if err := res[0].GetResource().UnmarshalTo(rc); err != nil {
		t.Fatal(err)
	}
	nt.ValidateRecursively(t, rc)
}
