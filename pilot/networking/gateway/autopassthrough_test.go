package gateway_test

import (
	"path/filepath"
	"slices"
	"sort"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/internal/golden"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// eastwest is a pod of Istio's east-west gateway on network-2.
func eastwest() *model.Proxy {
	p := router("istio-system", map[string]string{"istio": "eastwestgateway"})
	p.Metadata.Network = "network-2"
	return p
}

// bookinfoSNI are the SNI-DNAT names of Bookinfo (port 9080) with the
// subsets of destination-rule-all.yaml, as istiod names them.
func bookinfoSNI() []string {
	subsets := map[string][]string{
		"details": {"v1", "v2"}, "productpage": {"v1"},
		"ratings": {"v1", "v2", "v2-mysql", "v2-mysql-vm"}, "reviews": {"v1", "v2", "v3"},
	}
	var out []string
	for app, ss := range subsets {
		host := app + ".default.svc.cluster.local"
		out = append(out, "outbound_.9080_._."+host)
		for _, s := range ss {
			out = append(out, "outbound_.9080_."+s+"_."+host)
		}
	}
	sort.Strings(out)
	return out
}

// TestAutoPassthrough builds Istio's cross-network-gateway (port 15443,
// TLS, AUTO_PASSTHROUGH, hosts *.local) on Bookinfo for the east-west
// gateway: the listener has a tls_inspector and one chain per service port
// and subset matching the SNI-DNAT name and Istio's mTLS ALPNs, a
// tcp_proxy to the cluster of that name; CDS has exactly those clusters
// besides the usual ones, EDS without TLS origination, and EDS serves them
// with the mTLS endpoints of the plain cluster. Everything validates and
// matches testdata/eastwest/out.
func TestAutoPassthrough(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, nt.LoadConfigs(t, mustAbs(t, "testdata/eastwest/cross-network-gateway.yaml"), "istio-system")...)
	for host, eps := range in.Endpoints {
		if host == "ratings.default.svc.cluster.local" {
			continue // no sidecar: not reachable through the gateway
		}
		for _, e := range eps {
			e.Labels[cluster.TLSModeLabel] = cluster.TLSModeIstio
		}
	}
	push := in.PushContext()
	proxy := eastwest()
	want := bookinfoSNI()

	ls := gateway.BuildListeners(proxy, push, discard)
	if len(ls) != 1 || ls[0].GetName() != "0.0.0.0_15443" {
		t.Fatalf("listeners %v, want 0.0.0.0_15443", listenerNames(ls))
	}
	l := ls[0]
	nt.ValidateRecursively(t, l)
	if len(l.GetListenerFilters()) != 1 || l.GetListenerFilters()[0].GetName() != wellknown.TlsInspector {
		t.Errorf("listener filters %v, want the tls_inspector", l.GetListenerFilters())
	}
	var chains []string
	for _, fc := range l.GetFilterChains() {
		m := fc.GetFilterChainMatch()
		if len(m.GetServerNames()) != 1 {
			t.Fatalf("chain server names %v, want one SNI-DNAT name", m.GetServerNames())
		}
		sni := m.GetServerNames()[0]
		chains = append(chains, sni)
		if !slices.Equal(m.GetApplicationProtocols(), authn.IstioALPN) {
			t.Errorf("%s: ALPN %v, want %v", sni, m.GetApplicationProtocols(), authn.IstioALPN)
		}
		if got := tcpCluster(t, fc); got != sni {
			t.Errorf("%s forwards to %q, want the cluster of its SNI", sni, got)
		}
		if fc.GetTransportSocket() != nil {
			t.Errorf("%s terminates TLS", sni)
		}
	}
	sort.Strings(chains)
	if !slices.Equal(chains, want) {
		t.Errorf("chains\n%v\nwant\n%v", chains, want)
	}

	cs, err := cluster.Build(proxy, push)
	if err != nil {
		t.Fatal(err)
	}
	var sni []string
	var sniClusters []proto.Message
	for _, c := range cs {
		nt.ValidateRecursively(t, c)
		if !clustername.IsSNIDNAT(c.GetName()) {
			continue
		}
		sni = append(sni, c.GetName())
		sniClusters = append(sniClusters, c)
		if c.GetTransportSocket() != nil || len(c.GetTransportSocketMatches()) != 0 {
			t.Errorf("%s originates TLS", c.GetName())
		}
		if c.GetType() != clusterv3.Cluster_EDS || c.GetEdsClusterConfig().GetServiceName() != c.GetName() {
			t.Errorf("%s: type %v, EDS service name %q, want EDS of its own name", c.GetName(), c.GetType(), c.GetEdsClusterConfig().GetServiceName())
		}
	}
	if !slices.Equal(sni, want) {
		t.Errorf("SNI-DNAT clusters\n%v\nwant\n%v", sni, want)
	}

	eds := map[string]int{
		"outbound_.9080_._.reviews.default.svc.cluster.local":   3,
		"outbound_.9080_.v2_.reviews.default.svc.cluster.local": 1,
		"outbound|9080||ratings.default.svc.cluster.local":      1,
		"outbound_.9080_._.ratings.default.svc.cluster.local":   0,
	}
	for name, n := range eds {
		cla := endpoint.BuildLoadAssignment(proxy, push, name)
		nt.ValidateRecursively(t, cla)
		got := 0
		for _, g := range cla.GetEndpoints() {
			got += len(g.GetLbEndpoints())
		}
		if got != n || cla.GetClusterName() != name {
			t.Errorf("%s: %d endpoints (assignment %q), want %d", name, got, cla.GetClusterName(), n)
		}
	}

	out := golden.New(t, filepath.Join("testdata", "eastwest", "out"), *update)
	out.Messages(t, "cross-network-gateway.listeners.yaml", l)
	out.Messages(t, "cross-network-gateway.clusters.yaml", sniClusters...)
}

// TestAutoPassthroughHosts: a server's hosts choose the services (the
// namespace part is ignored, as istiod does); the ingress gateway, whose
// Gateway has no AUTO_PASSTHROUGH server, gets no SNI-DNAT cluster; and
// AUTO_PASSTHROUGH on a TCP protocol is not served.
func TestAutoPassthroughHosts(t *testing.T) {
	server := func(protocol string, hosts ...string) *networking.Server {
		return &networking.Server{Port: &networking.Port{Number: 15443, Name: "tls", Protocol: protocol}, Hosts: hosts,
			Tls: &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_AUTO_PASSTHROUGH}}
	}
	gw := func(servers ...*networking.Server) model.Config {
		return model.Config{Meta: model.Meta{Kind: model.KindGateway, Name: "ew", Namespace: "istio-system"},
			Spec: &networking.Gateway{Selector: map[string]string{"istio": "eastwestgateway"}, Servers: servers}}
	}
	cases := []struct {
		name   string
		server *networking.Server
		want   []string // hosts with chains
	}{
		{"exact", server("TLS", "reviews.default.svc.cluster.local"), []string{"reviews"}},
		{"namespace ignored", server("TLS", "other/*.svc.cluster.local"), []string{"details", "productpage", "ratings", "reviews"}},
		{"https", server("HTTPS", "*"), []string{"details", "productpage", "ratings", "reviews"}},
		{"no match", server("TLS", "*.example.com"), nil},
		{"tcp", server("TCP", "*"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ls := listeners(t, eastwest(), gw(tc.server))
			got := map[string]bool{}
			for _, fc := range ls["0.0.0.0_15443"].GetFilterChains() {
				_, _, host, _, _ := clustername.Parse(fc.GetFilterChainMatch().GetServerNames()[0])
				got[host[:len(host)-len(".default.svc.cluster.local")]] = true
			}
			var hosts []string
			for h := range got {
				hosts = append(hosts, h)
			}
			sort.Strings(hosts)
			if !slices.Equal(hosts, tc.want) {
				t.Errorf("chains for %v, want %v", hosts, tc.want)
			}
		})
	}
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, gw(server("TLS", "*.local")))
	cs, err := cluster.Build(ingress(), in.PushContext())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if clustername.IsSNIDNAT(c.GetName()) {
			t.Fatalf("ingress gateway got SNI-DNAT cluster %s", c.GetName())
		}
	}
}

func listenerNames(ls []*listenerv3.Listener) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.GetName())
	}
	return out
}
