package gateway_test

import (
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

func gatewayConfig(servers ...*networking.Server) model.Config {
	return model.Config{
		Meta: model.Meta{Kind: model.KindGateway, Name: "gw", Namespace: "default"},
		Spec: &networking.Gateway{Selector: map[string]string{"istio": "ingressgateway"}, Servers: servers},
	}
}

func tcpServer(port uint32, protocol string) *networking.Server {
	return &networking.Server{Port: &networking.Port{Number: port, Name: "p", Protocol: protocol}, Hosts: []string{"*"}}
}

// tcpVS binds tcp routes to gateway gw.
func tcpVS(routes ...*networking.TCPRoute) model.Config {
	return model.Config{
		Meta: model.Meta{Kind: model.KindVirtualService, Name: "tcp", Namespace: "default"},
		Spec: &networking.VirtualService{Hosts: []string{"*"}, Gateways: []string{"gw"}, Tcp: routes},
	}
}

func tcpTo(host string, match ...*networking.L4MatchAttributes) *networking.TCPRoute {
	return &networking.TCPRoute{Match: match, Route: []*networking.RouteDestination{{
		Destination: &networking.Destination{Host: host, Port: &networking.PortSelector{Number: 9080}},
	}}}
}

func listeners(t *testing.T, proxy *model.Proxy, configs ...model.Config) map[string]*listenerv3.Listener {
	t.Helper()
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, configs...)
	out := map[string]*listenerv3.Listener{}
	for _, l := range gateway.BuildListeners(proxy, in.PushContext(), discard) {
		nt.ValidateRecursively(t, l)
		out[l.GetName()] = l
	}
	return out
}

// tcpCluster is the cluster of a chain's single tcp_proxy.
func tcpCluster(t *testing.T, fc *listenerv3.FilterChain) string {
	t.Helper()
	tp := &tcpv3.TcpProxy{}
	if err := nt.MainFilter(fc).GetTypedConfig().UnmarshalTo(tp); err != nil {
		t.Fatalf("chain filter is not a tcp_proxy: %v", err)
	}
	return tp.GetCluster()
}

func TestTCPServerKinds(t *testing.T) {
	vs := tcpVS(tcpTo("ratings"))
	for _, proto := range []string{"TCP", "MONGO", "REDIS", "MYSQL", "tcp"} {
		ls := listeners(t, ingress(), gatewayConfig(tcpServer(7000, proto)), vs)
		l := ls["0.0.0.0_7000"]
		if l == nil || len(l.GetFilterChains()) != 1 {
			t.Fatalf("%s server: listeners %v, want 0.0.0.0_7000 with one chain", proto, l)
		}
		if got := tcpCluster(t, l.GetFilterChains()[0]); got != "outbound|9080||ratings.default.svc.cluster.local" {
			t.Errorf("%s server forwards to %q, want ratings", proto, got)
		}
		if l.GetFilterChains()[0].GetFilterChainMatch() != nil || len(l.GetListenerFilters()) != 0 {
			t.Errorf("%s server: opaque TCP needs no match and no tls_inspector", proto)
		}
	}
	auto := tcpServer(15443, "TCP")
	auto.Tls = &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_AUTO_PASSTHROUGH}
	if ls := listeners(t, ingress(), gatewayConfig(auto), vs); len(ls) != 0 {
		t.Errorf("AUTO_PASSTHROUGH server served: %v", ls)
	}
	if ls := listeners(t, ingress(), gatewayConfig(tcpServer(7000, "UDP")), vs); len(ls) != 0 {
		t.Errorf("UDP server served: %v", ls)
	}
}

// TestTCPRouteMatches: the first tcp route whose match applies wins: port,
// gateways and sourceLabels (the router's labels) are checked; no
// applying route leaves the server unserved; an HTTP server on the same
// port as a TCP server is not served.
func TestTCPRouteMatches(t *testing.T) {
	vs := tcpVS(
		tcpTo("details", &networking.L4MatchAttributes{Port: 7001}),
		tcpTo("reviews", &networking.L4MatchAttributes{Gateways: []string{"other"}}),
		tcpTo("productpage", &networking.L4MatchAttributes{SourceLabels: map[string]string{"istio": "egressgateway"}}),
		tcpTo("ratings", &networking.L4MatchAttributes{Port: 7000, Gateways: []string{"default/gw"},
			SourceLabels: map[string]string{"istio": "ingressgateway"}}),
	)
	ls := listeners(t, ingress(), gatewayConfig(tcpServer(7000, "TCP"), tcpServer(7002, "TCP")), vs)
	if got := tcpCluster(t, ls["0.0.0.0_7000"].GetFilterChains()[0]); got != "outbound|9080||ratings.default.svc.cluster.local" {
		t.Errorf("port 7000 forwards to %q, want ratings (the first applying route)", got)
	}
	if ls["0.0.0.0_7002"] != nil {
		t.Error("port 7002, which no route applies to, is served")
	}
	labelled := router("istio-system", map[string]string{"istio": "ingressgateway", "x": "y"})
	gw := gatewayConfig(tcpServer(7000, "TCP"), &networking.Server{
		Port: &networking.Port{Number: 7000, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}})
	ls = listeners(t, labelled, gw, vs)
	if l := ls["0.0.0.0_7000"]; l == nil || len(l.GetFilterChains()) != 1 {
		t.Fatalf("TCP and HTTP on one port: %v, want the TCP chain alone", l)
	}
}
