package serviceentry

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// fakeStore is a ConfigStore over a map, safe for concurrent use.
type fakeStore struct {
	mu      sync.Mutex
	configs map[model.Kind][]model.Config
}

func (f *fakeStore) List(kind model.Kind) []model.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.configs[kind]
}

func (f *fakeStore) set(kind model.Kind, cfgs ...model.Config) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.configs == nil {
		f.configs = map[model.Kind][]model.Config{}
	}
	f.configs[kind] = cfgs
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func key(kind model.Kind, host, ns string) model.ConfigKey {
	return model.ConfigKey{Kind: kind, Name: host, Namespace: ns}
}

func addresses(idx *model.EndpointIndex, host string) []string {
	var out []string
	for _, e := range idx.Endpoints(host) {
		out = append(out, e.Address)
	}
	return out
}

func vmEntry(port uint32) model.Config {
	return seConfig("vm", "shop", &networking.ServiceEntry{
		Hosts:            []string{"vm.example.com"},
		Location:         networking.ServiceEntry_MESH_INTERNAL,
		Resolution:       networking.ServiceEntry_STATIC,
		Ports:            []*networking.ServicePort{{Number: port, Name: "http"}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "vm"}},
	})
}

func vmWorkload(name, ip string) model.Config {
	return weConfig(name, "shop", &networking.WorkloadEntry{Address: ip, Labels: map[string]string{"app": "vm"}})
}

func TestRegistryRecompute(t *testing.T) {
	store := &fakeStore{}
	idx := model.NewEndpointIndex()
	r := NewRegistry("cluster.local", store, idx, discardLogger())
	const host = "vm.example.com"
	svcKey := key(model.KindService, host, "shop")
	epKey := key(model.KindEndpoints, host, "shop")

	steps := []struct {
		name    string
		entries []model.Config
		wes     []model.Config
		want    model.RegistryChanges
		wantIPs []string
	}{
		{"empty store", nil, nil, model.RegistryChanges{}, nil},
		{"add the entry", []model.Config{vmEntry(80)}, []model.Config{vmWorkload("vm-1", "10.2.0.1")},
			model.RegistryChanges{Services: []model.ConfigKey{svcKey}}, []string{"10.2.0.1"}},
		{"unchanged", []model.Config{vmEntry(80)}, []model.Config{vmWorkload("vm-1", "10.2.0.1")},
			model.RegistryChanges{}, []string{"10.2.0.1"}},
		{"a new WorkloadEntry: endpoints only", []model.Config{vmEntry(80)},
			[]model.Config{vmWorkload("vm-1", "10.2.0.1"), vmWorkload("vm-2", "10.2.0.2")},
			model.RegistryChanges{Endpoints: []model.ConfigKey{epKey}}, []string{"10.2.0.1", "10.2.0.2"}},
		{"a port change: service", []model.Config{vmEntry(81)},
			[]model.Config{vmWorkload("vm-1", "10.2.0.1"), vmWorkload("vm-2", "10.2.0.2")},
			model.RegistryChanges{Services: []model.ConfigKey{svcKey}}, []string{"10.2.0.1", "10.2.0.2"}},
		{"entry deleted", nil, []model.Config{vmWorkload("vm-1", "10.2.0.1")},
			model.RegistryChanges{Services: []model.ConfigKey{svcKey}}, nil},
	}
	for _, st := range steps {
		store.set(model.KindServiceEntry, st.entries...)
		store.set(model.KindWorkloadEntry, st.wes...)
		got := r.Recompute()
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Fatalf("%s: changes (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.wantIPs, addresses(idx, host)); diff != "" {
			t.Fatalf("%s: endpoints (-want +got):\n%s", st.name, diff)
		}
		if n := len(r.Services()); n != len(st.entries) {
			t.Fatalf("%s: %d services, want %d", st.name, n, len(st.entries))
		}
	}
}

func TestRegistrySameHostMerges(t *testing.T) {
	store := &fakeStore{}
	idx := model.NewEndpointIndex()
	r := NewRegistry("cluster.local", store, idx, discardLogger())
	older := seConfig("b-older", "ns", &networking.ServiceEntry{
		Hosts: []string{"api.example.com"}, Resolution: networking.ServiceEntry_STATIC,
		Ports:     []*networking.ServicePort{{Number: 80, Name: "http"}},
		Endpoints: []*networking.WorkloadEntry{{Address: "10.0.0.1"}, {Address: "10.0.0.2"}},
	})
	older.CreationTimestamp = time.Unix(100, 0)
	newer := seConfig("a-newer", "ns", &networking.ServiceEntry{
		Hosts: []string{"api.example.com"}, Resolution: networking.ServiceEntry_STATIC,
		Addresses: []string{"240.0.0.1"},
		Ports:     []*networking.ServicePort{{Number: 80, Name: "http"}},
		Endpoints: []*networking.WorkloadEntry{{Address: "10.0.0.2"}, {Address: "10.0.0.3"}},
	})
	newer.CreationTimestamp = time.Unix(200, 0)
	// The store lists by name, so the newer entry comes first.
	store.set(model.KindServiceEntry, newer, older)
	r.Recompute()
	svcs := r.Services()
	if len(svcs) != 1 || svcs[0].Name != "b-older" || svcs[0].Address != "" {
		t.Fatalf("services = %+v, want the older entry's definition", svcs)
	}
	if r.Service("api.example.com") != svcs[0] || r.Service("missing.example.com") != nil {
		t.Fatalf("Service lookup disagrees with Services")
	}
	if diff := cmp.Diff([]string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, addresses(idx, "api.example.com")); diff != "" {
		t.Fatalf("merged endpoints (-want +got):\n%s", diff)
	}
	if eps := idx.Endpoints("api.example.com"); len(eps) != 3 {
		t.Fatalf("got %d endpoints, want 3 without duplicates", len(eps))
	}
}

func TestRegistryUsesItsShard(t *testing.T) {
	store := &fakeStore{}
	idx := model.NewEndpointIndex()
	other := []*model.Endpoint{{Address: "10.9.9.9", Port: 80, ServicePortName: "http", Healthy: true}}
	idx.Update("Kubernetes", "vm.example.com", other)
	r := NewRegistry("cluster.local", store, idx, discardLogger())
	store.set(model.KindServiceEntry, vmEntry(80))
	store.set(model.KindWorkloadEntry, vmWorkload("vm-1", "10.2.0.1"))
	r.Recompute()
	store.set(model.KindServiceEntry)
	r.Recompute()
	if diff := cmp.Diff([]string{"10.9.9.9"}, addresses(idx, "vm.example.com")); diff != "" {
		t.Fatalf("endpoints of other shards touched (-want +got):\n%s", diff)
	}
}

func TestRegistryIgnoresWrongSpec(t *testing.T) {
	store := &fakeStore{}
	store.set(model.KindServiceEntry, model.Config{
		Meta: model.Meta{Kind: model.KindServiceEntry, Name: "bad", Namespace: "ns"},
		Spec: &networking.VirtualService{Hosts: []string{"x"}},
	}, vmEntry(80))
	r := NewRegistry("cluster.local", store, model.NewEndpointIndex(), discardLogger())
	if ch := r.Recompute(); len(ch.Services) != 1 {
		t.Fatalf("changes = %+v, want the one valid entry", ch)
	}
}

func TestRegistryConcurrentUse(t *testing.T) {
	store := &fakeStore{}
	store.set(model.KindServiceEntry, vmEntry(80))
	r := NewRegistry("cluster.local", store, model.NewEndpointIndex(), discardLogger())
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if w%2 == 0 {
					store.set(model.KindWorkloadEntry, vmWorkload("vm", "10.2.0."+string(rune('1'+i%9))))
					r.Recompute()
				}
				for _, s := range r.Services() {
					_ = s.Hostname
				}
			}
		}()
	}
	wg.Wait()
	if got := r.Services(); len(got) != 1 {
		t.Fatalf("services = %v, want one", got)
	}
}
