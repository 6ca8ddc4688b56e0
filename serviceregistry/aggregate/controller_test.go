package aggregate

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/model"
)

type staticRegistry []*model.Service

func (s staticRegistry) Services() []*model.Service { return s }

func svc(host string, reg model.Registry) *model.Service {
	return &model.Service{Hostname: host, Registry: reg}
}

func TestServicesMergeFirstWins(t *testing.T) {
	kube := staticRegistry{
		svc("b.ns.svc.cluster.local", model.RegistryKubernetes),
		svc("shared.example.com", model.RegistryKubernetes),
	}
	se := staticRegistry{
		svc("a.example.com", model.RegistryServiceEntry),
		svc("shared.example.com", model.RegistryServiceEntry),
		svc("z.example.com", model.RegistryServiceEntry),
	}
	got := New(kube, se).Services()
	want := []*model.Service{
		svc("a.example.com", model.RegistryServiceEntry),
		svc("b.ns.svc.cluster.local", model.RegistryKubernetes),
		svc("shared.example.com", model.RegistryKubernetes),
		svc("z.example.com", model.RegistryServiceEntry),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("services (-want +got):\n%s", diff)
	}
	// Reversed order: the ServiceEntry definition wins.
	if got := New(se, kube).Services(); got[2].Registry != model.RegistryServiceEntry {
		t.Fatalf("shared host from %s, want the first registry's", got[2].Registry)
	}
}

func TestServicesEmpty(t *testing.T) {
	if got := New().Services(); len(got) != 0 {
		t.Fatalf("services = %v, want none", got)
	}
	if got := New(staticRegistry(nil)).Services(); len(got) != 0 {
		t.Fatalf("services = %v, want none", got)
	}
}

func TestServicesDoesNotChangeInputs(t *testing.T) {
	reg := staticRegistry{svc("b", model.RegistryKubernetes), svc("a", model.RegistryKubernetes)}
	New(reg).Services()
	if reg[0].Hostname != "b" {
		t.Fatalf("registry snapshot was reordered: %v", reg)
	}
}

// TestClusterVIPsMerged: a Kubernetes service of two clusters (the local
// registry first, then the remote clusters') has each cluster's address,
// by Services and by Service alike; the local definition stays primary.
func TestClusterVIPsMerged(t *testing.T) {
	const host = "web.shop.svc.cluster.local"
	kube := func(cluster, vip string) *model.Service {
		return &model.Service{Hostname: host, Address: vip, ClusterID: cluster, Registry: model.RegistryKubernetes}
	}
	local := staticRegistry{kube("c1", "10.96.1.10")}
	remotes := staticRegistry{kube("c2", "10.96.2.20")}
	se := staticRegistry{{Hostname: host, Address: "240.240.0.1", Registry: model.RegistryServiceEntry}}
	c := New(local, remotes, se)
	want := map[string]string{"c1": "10.96.1.10", "c2": "10.96.2.20"}
	for what, got := range map[string]*model.Service{"Services": c.Services()[0], "Service": c.Service(host)} {
		if diff := cmp.Diff(want, got.ClusterVIPs); diff != "" || got.Address != "10.96.1.10" {
			t.Errorf("%s: address %s, ClusterVIPs (-want +got):\n%s", what, got.Address, diff)
		}
	}
	if local[0].ClusterVIPs != nil {
		t.Error("the registry's service was changed")
	}
	if got := New(local, se).Service(host); got != local[0] {
		t.Error("a single cluster's service is copied")
	}
}
