package model

import (
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// TestBuildNetworkGateways: gateways come from Services labelled with a
// network (port label or 15443, at their external IPs; host names are
// skipped), from meshNetworks addresses, and from meshNetworks
// registryServiceName (that service's external addresses).
func TestBuildNetworkGateways(t *testing.T) {
	services := []*Service{
		{Hostname: "eastwest.istio-system.svc.cluster.local", Labels: map[string]string{LabelTopologyNetwork: "n2"},
			ExternalAddresses: []string{"192.0.2.1", "gw.example.com"}},
		{Hostname: "custom.istio-system.svc.cluster.local",
			Labels:            map[string]string{LabelTopologyNetwork: "n3", LabelNetworkGatewayPort: "15444"},
			ExternalAddresses: []string{"192.0.2.3"}},
		{Hostname: "named.istio-system.svc.cluster.local", ExternalAddresses: []string{"192.0.2.4"}},
		{Hostname: "plain.default.svc.cluster.local", ExternalAddresses: []string{"192.0.2.9"}},
	}
	networks := &meshconfig.MeshNetworks{Networks: map[string]*meshconfig.Network{
		"n2": {Gateways: []*meshconfig.Network_IstioNetworkGateway{
			{Gw: &meshconfig.Network_IstioNetworkGateway_Address{Address: "192.0.2.2"}, Port: 443},
			// The labelled service's gateway again: listed once.
			{Gw: &meshconfig.Network_IstioNetworkGateway_Address{Address: "192.0.2.1"}, Port: 15443},
		}},
		"n4": {Gateways: []*meshconfig.Network_IstioNetworkGateway{
			{Gw: &meshconfig.Network_IstioNetworkGateway_RegistryServiceName{RegistryServiceName: "named.istio-system.svc.cluster.local"}, Port: 15443},
			{Gw: &meshconfig.Network_IstioNetworkGateway_RegistryServiceName{RegistryServiceName: "missing.istio-system.svc.cluster.local"}, Port: 15443},
		}},
	}}
	g := BuildNetworkGateways(networks, services)
	want := []NetworkGateway{
		{"n2", "192.0.2.1", 15443}, {"n2", "192.0.2.2", 443},
		{"n3", "192.0.2.3", 15444},
		{"n4", "192.0.2.4", 15443},
	}
	if got := g.All(); !slices.Equal(got, want) {
		t.Errorf("gateways %v, want %v", got, want)
	}
	if !g.Enabled() || g.ScaleFactor() != 2 || g.Version() == "" {
		t.Errorf("enabled %v, scale %d, version %q: want true, 2, set", g.Enabled(), g.ScaleFactor(), g.Version())
	}
	if again := BuildNetworkGateways(networks, services); again.Version() != g.Version() {
		t.Errorf("same gateways, versions %q and %q", g.Version(), again.Version())
	}
	services[1].ExternalAddresses = []string{"192.0.2.30"}
	if moved := BuildNetworkGateways(networks, services); moved.Version() == g.Version() {
		t.Errorf("a gateway moved and the version stayed %q", g.Version())
	}
	var none *NetworkGateways
	if none.Enabled() || none.ScaleFactor() != 1 || none.ForNetwork("n2") != nil || BuildNetworkGateways(nil, nil).Enabled() {
		t.Error("no gateways: want a single-network mesh")
	}
}

// resolvedNames is a GatewayNameResolver answering from a table.
type resolvedNames map[string][]string

func (r resolvedNames) Resolve(names []string) map[string][]string {
	out := map[string][]string{}
	for _, n := range names {
		out[n] = r[n]
	}
	return out
}

// TestBuildNetworkGatewaysResolving: a host name among gateway addresses
// (a Service's load balancer or meshNetworks) stands for each address it
// resolves to, with the gateway's network and port; one that resolves to
// nothing yet, or is no host name, is left out.
func TestBuildNetworkGatewaysResolving(t *testing.T) {
	services := []*Service{{Hostname: "eastwest.istio-system.svc.cluster.local", Labels: map[string]string{LabelTopologyNetwork: "n2"},
		ExternalAddresses: []string{"lb.example.com"}}}
	networks := &meshconfig.MeshNetworks{Networks: map[string]*meshconfig.Network{
		"n1": {Gateways: []*meshconfig.Network_IstioNetworkGateway{
			{Gw: &meshconfig.Network_IstioNetworkGateway_Address{Address: "gw.example.com"}, Port: 443},
			{Gw: &meshconfig.Network_IstioNetworkGateway_Address{Address: "pending.example.com"}, Port: 443},
			{Gw: &meshconfig.Network_IstioNetworkGateway_Address{Address: "not a/name"}, Port: 443},
		}},
	}}
	names := resolvedNames{"lb.example.com": {"192.0.2.5", "2001:db8::5"}, "gw.example.com": {"192.0.2.1"}}
	g := BuildNetworkGatewaysResolving(networks, services, names)
	want := []NetworkGateway{{"n1", "192.0.2.1", 443}, {"n2", "192.0.2.5", 15443}, {"n2", "2001:db8::5", 15443}}
	if got := g.All(); !slices.Equal(got, want) {
		t.Errorf("gateways %v, want %v", got, want)
	}
	if g.ScaleFactor() != 2 {
		t.Errorf("scale %d, want 2", g.ScaleFactor())
	}
}

// TestProxyNetwork: ISTIO_META_NETWORK is the proxy's network and, unless
// its labels name one, its topology.istio.io/network label.
func TestProxyNetwork(t *testing.T) {
	parse := func(meta map[string]any) *Proxy {
		t.Helper()
		md, err := structpb.NewStruct(meta)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ParseProxy(&corev3.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := parse(map[string]any{"NETWORK": "n1", "LABELS": map[string]any{"app": "a"}})
	if p.Metadata.Network != "n1" || p.Labels()[LabelTopologyNetwork] != "n1" || p.Labels()["app"] != "a" {
		t.Errorf("network %q, labels %v: want n1 in both", p.Metadata.Network, p.Labels())
	}
	p = parse(map[string]any{"NETWORK": "n1", "LABELS": map[string]any{LabelTopologyNetwork: "n9"}})
	if p.Labels()[LabelTopologyNetwork] != "n9" {
		t.Errorf("labels %v: the workload's own network label must win", p.Labels())
	}
	if p = parse(map[string]any{"NETWORK": "n1"}); p.Labels()[LabelTopologyNetwork] != "n1" {
		t.Errorf("no LABELS: labels %v, want the network", p.Labels())
	}
	if _, err := ParseProxy(&corev3.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local",
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"NETWORK": structpb.NewNumberValue(1)}}}); err == nil {
		t.Error("NETWORK 1 (a number): no error")
	}
}

// TestNetworkLabels: an endpoint's network is its network label for
// failoverPriority, without changing the endpoint's labels.
func TestNetworkLabels(t *testing.T) {
	e := &Endpoint{Labels: map[string]string{"app": "a"}, Network: "n1"}
	if got := NetworkLabels(e); got[LabelTopologyNetwork] != "n1" || got["app"] != "a" || len(e.Labels) != 1 {
		t.Errorf("labels %v (endpoint's %v), want app and the network, endpoint unchanged", got, e.Labels)
	}
	plain := &Endpoint{Labels: map[string]string{"app": "a"}}
	if got := NetworkLabels(plain); len(got) != 1 {
		t.Errorf("no network: labels %v, want the endpoint's", got)
	}
}
