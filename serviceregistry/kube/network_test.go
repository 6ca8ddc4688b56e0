package kube

import (
	"slices"
	"testing"

	meshconfig "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/model"
)

func netLabel(nw string) map[string]string {
	return map[string]string{model.LabelTopologyNetwork: nw}
}

// TestNetworksPrecedence: pod label, then the namespace's, then the
// system namespace's, then meshNetworks fromRegistry, then fromCidr (the
// longest prefix).
func TestNetworksPrecedence(t *testing.T) {
	mn := &meshconfig.MeshNetworks{Networks: map[string]*meshconfig.Network{
		"wide":   {Endpoints: []*meshconfig.Network_NetworkEndpoints{{Ne: &meshconfig.Network_NetworkEndpoints_FromCidr{FromCidr: "10.0.0.0/8"}}}},
		"narrow": {Endpoints: []*meshconfig.Network_NetworkEndpoints{{Ne: &meshconfig.Network_NetworkEndpoints_FromCidr{FromCidr: "10.1.0.0/16"}}}},
		"bad":    {Endpoints: []*meshconfig.Network_NetworkEndpoints{{Ne: &meshconfig.Network_NetworkEndpoints_FromCidr{FromCidr: "10.2.0.0"}}}},
		"reg":    {Endpoints: []*meshconfig.Network_NetworkEndpoints{{Ne: &meshconfig.Network_NetworkEndpoints_FromRegistry{FromRegistry: "other"}}}},
	}}
	n := NewNetworks("istio-system", "c1", mn)
	if got := BadCIDRs(mn); !slices.Equal(got, []string{"bad: 10.2.0.0"}) {
		t.Errorf("bad CIDRs %v", got)
	}
	check := func(step, ip, ns string, labels map[string]string, want string) {
		t.Helper()
		if got := n.Network(ip, ns, labels); got != want {
			t.Errorf("%s: network of %s in %s with %v = %q, want %q", step, ip, ns, labels, got, want)
		}
	}
	check("cidr", "10.1.2.3", "shop", nil, "narrow")
	check("cidr", "10.3.2.3", "shop", nil, "wide")
	check("cidr", "192.168.0.1", "shop", nil, "")
	if changed, system := n.OnNamespace("istio-system", netLabel("sys")); !changed || !system {
		t.Errorf("system namespace labelled: changed %v system %v", changed, system)
	}
	check("system namespace", "10.1.2.3", "shop", nil, "sys")
	if changed, system := n.OnNamespace("shop", netLabel("ns")); !changed || system {
		t.Errorf("namespace labelled: changed %v system %v", changed, system)
	}
	if changed, _ := n.OnNamespace("shop", netLabel("ns")); changed {
		t.Error("same label again: changed")
	}
	check("namespace", "10.1.2.3", "shop", nil, "ns")
	check("namespace", "10.1.2.3", "other", nil, "sys")
	check("pod", "10.1.2.3", "shop", netLabel("pod"), "pod")
	if changed, _ := n.OnNamespace("shop", nil); !changed {
		t.Error("namespace deleted: not changed")
	}
	check("namespace deleted", "10.1.2.3", "shop", nil, "sys")

	reg := NewNetworks("istio-system", "other", mn)
	if got := reg.Network("10.1.2.3", "shop", nil); got != "reg" {
		t.Errorf("fromRegistry: %q, want reg (before fromCidr)", got)
	}
	var none *Networks
	if got := none.Network("10.1.2.3", "shop", netLabel("pod")); got != "pod" {
		t.Errorf("nil resolver: %q, want the pod label", got)
	}
}

// TestEndpointNetwork: endpoints get their pod's resolved network.
func TestEndpointNetwork(t *testing.T) {
	svc := twoPortService()
	v1 := map[string]string{"app": "web", "version": "v1"}
	objs := Objects{Nodes: testNodes, Pods: []*corev1.Pod{
		pod("web-1", "shop", "10.1.0.1", v1, nil),
		pod("web-2", "shop", "10.1.0.2", map[string]string{"app": "web", model.LabelTopologyNetwork: "n2"}, nil),
	}}
	n := NewNetworks("istio-system", "c1", nil)
	n.OnNamespace("shop", netLabel("n1"))
	got := map[string]string{}
	for _, e := range NewIndex(objs).WithNetworks(n).Endpoints(svc) {
		got[e.Address] = e.Network
	}
	if got["10.1.0.1"] != "n1" || got["10.1.0.2"] != "n2" {
		t.Errorf("networks %v, want 10.1.0.1 n1 (namespace) and 10.1.0.2 n2 (pod)", got)
	}
}

// TestExternalAddresses: a Service's LoadBalancer ingress (IP, else host
// name) and external IPs, without duplicates.
func TestExternalAddresses(t *testing.T) {
	svc := service("eastwest", "istio-system", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalIPs = []string{"192.0.2.9", "192.0.2.1"}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}, {Hostname: "gw.example.com"}}
	})
	got := ConvertService(svc, "cluster.local").ExternalAddresses
	if want := []string{"192.0.2.1", "gw.example.com", "192.0.2.9"}; !slices.Equal(got, want) {
		t.Errorf("external addresses %v, want %v", got, want)
	}
}
