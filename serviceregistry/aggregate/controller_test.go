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
