package serviceentry

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
	"github.com/meshpilot/meshpilot/serviceregistry/kube"
)

// randomEntry makes a ServiceEntry from a small universe, so that hosts
// are shared by several entries (across namespaces too), selectors overlap
// and creation times tie.
func randomEntry(rng *rand.Rand, ns, name string) model.Config {
	hosts := []string{"a.example.com", "b.example.com", "short", "*.wild.example.com"}
	se := &networking.ServiceEntry{
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: []networking.ServiceEntry_Resolution{networking.ServiceEntry_STATIC, networking.ServiceEntry_DNS}[rng.IntN(2)],
		Ports:      []*networking.ServicePort{{Number: 80, Name: "http"}},
	}
	for range 1 + rng.IntN(2) {
		se.Hosts = append(se.Hosts, hosts[rng.IntN(len(hosts))])
	}
	if rng.IntN(2) == 0 {
		se.Ports = append(se.Ports, &networking.ServicePort{Number: 9000 + uint32(rng.IntN(2)), Name: "tcp", TargetPort: 7000})
	}
	switch rng.IntN(4) {
	case 0: // inline endpoints
		se.Endpoints = []*networking.WorkloadEntry{{Address: fmt.Sprintf("10.0.0.%d", rng.IntN(4))}}
	case 1: // no endpoints (DNS: the host itself)
	default:
		sel := map[string]string{"app": []string{"p", "q"}[rng.IntN(2)]}
		if rng.IntN(2) == 0 {
			sel["v"] = []string{"1", "2"}[rng.IntN(2)]
		}
		se.WorkloadSelector = &networking.WorkloadSelector{Labels: sel}
	}
	c := seConfig(name, ns, se)
	c.CreationTimestamp = time.Unix(int64(rng.IntN(3)), 0)
	c.ResourceVersion = fmt.Sprint(rng.IntN(1000))
	return c
}

func randomWorkload(rng *rand.Rand, ns, name string) model.Config {
	we := &networking.WorkloadEntry{
		Address:        fmt.Sprintf("10.1.0.%d", rng.IntN(6)), // collisions: deduplicated by key
		Labels:         map[string]string{"app": []string{"p", "q", "r"}[rng.IntN(3)], "v": []string{"1", "2"}[rng.IntN(2)]},
		ServiceAccount: []string{"", "sa1", "sa2"}[rng.IntN(3)],
	}
	if rng.IntN(3) == 0 {
		we.Ports = map[string]uint32{"http": 8080}
	}
	if rng.IntN(5) == 0 {
		we.Address = "" // no endpoint
	}
	return weConfig(name, ns, we)
}

// allEndpoints returns every endpoint of the ServiceEntry shard, by host.
func allEndpoints(idx *model.EndpointIndex, hosts []string) map[string][]*model.Endpoint {
	out := map[string][]*model.Endpoint{}
	for _, h := range hosts {
		if eps := idx.Endpoints(h); len(eps) > 0 {
			out[h] = eps
		}
	}
	return out
}

// naiveState is the registry's meaning written out the simple way (every
// ServiceEntry oldest first, every WorkloadEntry scanned for each): the
// services by host, and the endpoints written to a new index.
func naiveState(store model.ConfigStore, pods PodSource) (map[string]*model.Service, *model.EndpointIndex) {
	entries := slices.Clone(store.List(model.KindServiceEntry))
	slices.SortStableFunc(entries, func(a, b model.Config) int { return a.CreationTimestamp.Compare(b.CreationTimestamp) })
	workloads := store.List(model.KindWorkloadEntry)
	services := map[string]*model.Service{}
	eps := map[string][]*model.Endpoint{}
	seen := map[string]map[string]bool{}
	for i := range entries {
		cfg := &entries[i]
		podEps := PodEndpoints(cfg, pods)
		for _, svc := range Convert(cfg, "cluster.local") {
			if _, dup := services[svc.Hostname]; !dup {
				services[svc.Hostname] = svc
				seen[svc.Hostname] = map[string]bool{}
			}
			for _, e := range append(Endpoints(cfg, svc, workloads), podEps...) {
				if k := e.Key(); !seen[svc.Hostname][k] {
					seen[svc.Hostname][k] = true
					eps[svc.Hostname] = append(eps[svc.Hostname], e)
				}
			}
		}
	}
	idx := model.NewEndpointIndex()
	for h, e := range eps {
		idx.Update(ShardServiceEntry, h, e)
	}
	return services, idx
}

// TestUpdateMatchesRecompute applies random sequences of adds, updates and
// deletes of ServiceEntries and WorkloadEntries to a store, and checks after
// each step that Update of the changed keys leaves the registry, the
// endpoint index and the reported changes exactly as Recompute does, and
// keeps the pointers of services it does not report changed.
func TestUpdateMatchesRecompute(t *testing.T) {
	namespaces := []string{"ns1", "ns2"}
	pods := kube.NewIndex(kube.Objects{Pods: []*corev1.Pod{
		servingPod("ns1", "pod-p", "10.2.0.1", map[string]string{"app": "p", "v": "1"}),
		servingPod("ns2", "pod-q", "10.2.0.2", map[string]string{"app": "q", "v": "2"}),
	}})
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 17))
		store := memory.New()
		incIdx, fullIdx := model.NewEndpointIndex(), model.NewEndpointIndex()
		inc := NewRegistry("cluster.local", store, incIdx, discardLogger())
		full := NewRegistry("cluster.local", store, fullIdx, discardLogger())
		inc.SetPods(pods)
		full.SetPods(pods)
		inc.Recompute()
		full.Recompute()
		for step := range 60 {
			var keys []model.ConfigKey
			for range 1 + rng.IntN(3) {
				ns := namespaces[rng.IntN(len(namespaces))]
				var c model.Config
				if rng.IntN(2) == 0 {
					c = randomEntry(rng, ns, fmt.Sprintf("se%d", rng.IntN(5)))
				} else {
					c = randomWorkload(rng, ns, fmt.Sprintf("we%d", rng.IntN(6)))
				}
				if rng.IntN(4) == 0 {
					store.Delete(c.Kind, c.Namespace, c.Name)
				} else {
					store.Apply(c)
				}
				keys = append(keys, c.Key())
			}
			before := inc.set.ByHost()
			got := inc.Update(keys)
			want := full.Recompute()
			where := fmt.Sprintf("seed %d step %d (keys %v)", seed, step, keys)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s: changes (-recompute +update):\n%s", where, diff)
			}
			if diff := cmp.Diff(full.Services(), inc.Services()); diff != "" {
				t.Fatalf("%s: services (-recompute +update):\n%s", where, diff)
			}
			var hosts []string
			for _, s := range full.Services() {
				hosts = append(hosts, s.Hostname)
			}
			for h := range before {
				hosts = append(hosts, h)
			}
			if diff := cmp.Diff(allEndpoints(fullIdx, hosts), allEndpoints(incIdx, hosts)); diff != "" {
				t.Fatalf("%s: endpoints (-recompute +update):\n%s", where, diff)
			}
			naive, naiveIdx := naiveState(store, pods)
			if diff := cmp.Diff(naive, inc.set.ByHost()); diff != "" {
				t.Fatalf("%s: services (-naive +update):\n%s", where, diff)
			}
			if diff := cmp.Diff(allEndpoints(naiveIdx, hosts), allEndpoints(incIdx, hosts)); diff != "" {
				t.Fatalf("%s: endpoints (-naive +update):\n%s", where, diff)
			}
			if inc.SelectsPods() != full.SelectsPods() {
				t.Fatalf("%s: SelectsPods %v, want %v", where, inc.SelectsPods(), full.SelectsPods())
			}
			for h, old := range before {
				if svc := inc.Service(h); svc != nil && svc != old && model.ServiceEqual(old, svc) && old.ResourceVersion == svc.ResourceVersion {
					t.Fatalf("%s: %s got a new pointer for the same definition", where, h)
				}
			}
		}
	}
}

// TestUpdateWorkloadEntryOnlyEndpoints: a WorkloadEntry change touches only
// the hosts of the entries that select it, as an endpoint-only change.
func TestUpdateWorkloadEntryOnlyEndpoints(t *testing.T) {
	store := memory.New()
	idx := model.NewEndpointIndex()
	r := NewRegistry("cluster.local", store, idx, discardLogger())
	store.Apply(vmEntry(80))
	other := seConfig("other", "shop", &networking.ServiceEntry{
		Hosts: []string{"other.example.com"}, Resolution: networking.ServiceEntry_STATIC,
		Ports:            []*networking.ServicePort{{Number: 80, Name: "http"}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "other"}},
	})
	store.Apply(other)
	store.Apply(vmWorkload("vm-1", "10.2.0.1"))
	r.Recompute()
	defined := r.Service("other.example.com")

	store.Apply(vmWorkload("vm-2", "10.2.0.2"))
	ch := r.Update([]model.ConfigKey{{Kind: model.KindWorkloadEntry, Namespace: "shop", Name: "vm-2"}})
	want := model.RegistryChanges{Endpoints: []model.ConfigKey{key(model.KindEndpoints, "vm.example.com", "shop")}}
	if diff := cmp.Diff(want, ch); diff != "" {
		t.Fatalf("changes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"10.2.0.1", "10.2.0.2"}, addresses(idx, "vm.example.com")); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
	if r.Service("other.example.com") != defined {
		t.Error("an unrelated service got a new pointer")
	}
	// A WorkloadEntry in another namespace selects nothing.
	store.Apply(weConfig("vm-3", "elsewhere", &networking.WorkloadEntry{Address: "10.2.0.3", Labels: map[string]string{"app": "vm"}}))
	if ch := r.Update([]model.ConfigKey{{Kind: model.KindWorkloadEntry, Namespace: "elsewhere", Name: "vm-3"}}); !ch.Empty() {
		t.Errorf("a WorkloadEntry of another namespace changed %+v", ch)
	}
}

// TestUpdateBeforeRecompute: the first Update reads everything.
func TestUpdateBeforeRecompute(t *testing.T) {
	store := memory.New()
	idx := model.NewEndpointIndex()
	store.Apply(vmEntry(80))
	store.Apply(vmWorkload("vm-1", "10.2.0.1"))
	r := NewRegistry("cluster.local", store, idx, discardLogger())
	r.Update(nil)
	if diff := cmp.Diff([]string{"10.2.0.1"}, addresses(idx, "vm.example.com")); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
	if !r.SelectsPods() {
		t.Error("SelectsPods false after the first Update")
	}
}

// tripcomStore fills a store in Trip.com's shape: n ServiceEntries with a
// workloadSelector and n WorkloadEntries, one selected by each, over 100
// namespaces.
func tripcomStore(n int) *memory.Store {
	configs := make([]model.Config, 0, 2*n)
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i%100)
		app := fmt.Sprintf("svc-%d", i)
		configs = append(configs, seConfig(app, ns, &networking.ServiceEntry{
			Hosts:            []string{app + ".example.com"},
			Location:         networking.ServiceEntry_MESH_INTERNAL,
			Resolution:       networking.ServiceEntry_STATIC,
			Ports:            []*networking.ServicePort{{Number: 80, Name: "http"}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": app}},
		}), weConfig(app, ns, &networking.WorkloadEntry{
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), Labels: map[string]string{"app": app},
		}))
	}
	store := memory.New()
	store.Replace(configs)
	return store
}

// BenchmarkRegistryOneChange measures the registry's work for one changed
// entry (a ServiceEntry added, then removed) at n ServiceEntries and n
// WorkloadEntries: Recompute re-reads everything, Update the changed key.
func BenchmarkRegistryOneChange(b *testing.B) {
	marker := seConfig("marker", "load-markers", &networking.ServiceEntry{
		Hosts: []string{"marker.example.com"}, Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{{Number: 80, Name: "http"}},
	})
	for _, n := range []int{3000, 30000} {
		for _, mode := range []string{"Recompute", "Update"} {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) {
				store := tripcomStore(n)
				r := NewRegistry("cluster.local", store, model.NewEndpointIndex(), discardLogger())
				r.Recompute()
				keys := []model.ConfigKey{marker.Key()}
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					if i%2 == 0 {
						store.Apply(marker)
					} else {
						store.Delete(marker.Kind, marker.Namespace, marker.Name)
					}
					b.StartTimer()
					var ch model.RegistryChanges
					if mode == "Recompute" {
						ch = r.Recompute()
					} else {
						ch = r.Update(keys)
					}
					if len(ch.Services) != 1 {
						b.Fatalf("changes %+v, want the marker", ch)
					}
				}
			})
		}
	}
}
