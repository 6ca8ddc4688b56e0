package model

import (
	"maps"
	"testing"
)

func kubeSvc(cluster, vip string) *Service {
	return &Service{Hostname: "reviews.default.svc.cluster.local", Address: vip, ClusterID: cluster, Registry: RegistryKubernetes}
}

func TestMergeClusters(t *testing.T) {
	local, remote, remote2 := kubeSvc("c1", "10.96.0.1"), kubeSvc("c2", "10.100.0.1"), kubeSvc("c3", "10.200.0.1")
	if got := MergeClusters(local); got != local {
		t.Error("a single definition is copied")
	}
	if got := MergeClusters(local, kubeSvc("c1", "10.96.0.9")); got != local {
		t.Error("a second definition of the same cluster changes the service")
	}
	se := &Service{Hostname: local.Hostname, Address: "240.0.0.1", Registry: RegistryServiceEntry}
	if got := MergeClusters(local, se); got != local {
		t.Error("a ServiceEntry adds a cluster address")
	}
	merged := MergeClusters(local, remote)
	want := map[string]string{"c1": "10.96.0.1", "c2": "10.100.0.1"}
	if merged == local || !maps.Equal(merged.ClusterVIPs, want) || local.ClusterVIPs != nil {
		t.Fatalf("merged ClusterVIPs %v (input changed: %v), want %v", merged.ClusterVIPs, local.ClusterVIPs, want)
	}
	// Merging composes (remote clusters merged first, then with the local one).
	remotes := MergeClusters(remote, remote2)
	all := MergeClusters(local, remotes)
	want["c3"] = "10.200.0.1"
	if !maps.Equal(all.ClusterVIPs, want) {
		t.Errorf("composed ClusterVIPs %v, want %v", all.ClusterVIPs, want)
	}
	if again := MergeClusters(all, remote, remote2); again != all {
		t.Error("merging what is already merged copies")
	}
	for cluster, addr := range map[string]string{"c1": "10.96.0.1", "c2": "10.100.0.1", "c3": "10.200.0.1", "": "10.96.0.1", "other": "10.96.0.1"} {
		if got := all.AddressFor(cluster); got != addr || !all.HasAddressFor(cluster) {
			t.Errorf("AddressFor(%q) = %q, want %q", cluster, got, addr)
		}
	}
	headless := MergeClusters(kubeSvc("c1", "None"), kubeSvc("c2", "10.100.0.1"))
	if headless.AddressFor("c1") != "None" || headless.HasAddressFor("c1") || headless.AddressFor("c2") != "10.100.0.1" {
		t.Errorf("headless locally, ClusterIP remotely: %v", headless.ClusterVIPs)
	}
}
