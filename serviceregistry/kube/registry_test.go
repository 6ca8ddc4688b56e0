package kube

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/model"
)

func key(kind model.Kind, host, ns string) model.ConfigKey {
	return model.ConfigKey{Kind: kind, Name: host, Namespace: ns}
}

func TestRegistryReplace(t *testing.T) {
	idx := model.NewEndpointIndex()
	r := NewRegistry("cluster.local", idx, discardLogger())
	labels := map[string]string{"app": "web"}
	web := service("web", "shop", nil)
	db := service("db", "shop", func(s *corev1.Service) { s.Spec.ClusterIP = "10.0.0.2" })
	const webHost, dbHost = "web.shop.svc.cluster.local", "db.shop.svc.cluster.local"

	steps := []struct {
		name string
		objs Objects
		want model.RegistryChanges
		// wantEndpoints[host] lists endpoint addresses in the index.
		wantEndpoints map[string][]string
	}{
		{
			name:          "add two services",
			objs:          Objects{Services: []*corev1.Service{web, db}, Pods: []*corev1.Pod{pod("web-1", "shop", "10.1.0.1", labels, nil)}},
			want:          model.RegistryChanges{Services: []model.ConfigKey{key(model.KindService, dbHost, "shop"), key(model.KindService, webHost, "shop")}},
			wantEndpoints: map[string][]string{webHost: {"10.1.0.1"}},
		},
		{
			name:          "same input: nothing changes",
			objs:          Objects{Services: []*corev1.Service{web, db}, Pods: []*corev1.Pod{pod("web-1", "shop", "10.1.0.1", labels, nil)}},
			wantEndpoints: map[string][]string{webHost: {"10.1.0.1"}},
		},
		{
			name: "a new pod: endpoints only",
			objs: Objects{Services: []*corev1.Service{web, db}, Pods: []*corev1.Pod{
				pod("web-1", "shop", "10.1.0.1", labels, nil), pod("web-2", "shop", "10.1.0.2", labels, nil),
			}},
			want:          model.RegistryChanges{Endpoints: []model.ConfigKey{key(model.KindEndpoints, webHost, "shop")}},
			wantEndpoints: map[string][]string{webHost: {"10.1.0.1", "10.1.0.2"}},
		},
		{
			name: "a new resource version alone is no change",
			objs: Objects{Services: []*corev1.Service{withVersion(web, "7"), db}, Pods: []*corev1.Pod{
				pod("web-1", "shop", "10.1.0.1", labels, nil), pod("web-2", "shop", "10.1.0.2", labels, nil),
			}},
			wantEndpoints: map[string][]string{webHost: {"10.1.0.1", "10.1.0.2"}},
		},
		{
			name: "a port change: service key only, though endpoints changed too",
			objs: Objects{Services: []*corev1.Service{service("web", "shop", func(s *corev1.Service) { s.Spec.Ports[0].Name, s.Spec.Ports[0].Port = "http-web", 81 }), db},
				Pods: []*corev1.Pod{pod("web-1", "shop", "10.1.0.1", labels, nil)}},
			want:          model.RegistryChanges{Services: []model.ConfigKey{key(model.KindService, webHost, "shop")}},
			wantEndpoints: map[string][]string{webHost: {"10.1.0.1"}},
		},
		{
			name:          "delete web: service key, endpoints removed",
			objs:          Objects{Services: []*corev1.Service{db}, Pods: []*corev1.Pod{pod("web-1", "shop", "10.1.0.1", labels, nil)}},
			want:          model.RegistryChanges{Services: []model.ConfigKey{key(model.KindService, webHost, "shop")}},
			wantEndpoints: map[string][]string{},
		},
	}
	for _, st := range steps {
		got := r.Replace(st.objs)
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Fatalf("%s: changes (-want +got):\n%s", st.name, diff)
		}
		for _, host := range []string{webHost, dbHost} {
			var addrs []string
			for _, e := range idx.Endpoints(host) {
				addrs = append(addrs, e.Address)
			}
			if diff := cmp.Diff(st.wantEndpoints[host], addrs); diff != "" {
				t.Fatalf("%s: endpoints of %s (-want +got):\n%s", st.name, host, diff)
			}
		}
	}
	if got := r.Services(); len(got) != 1 || got[0].Hostname != dbHost {
		t.Fatalf("services = %v, want only %s", got, dbHost)
	}
}

func withVersion(s *corev1.Service, rv string) *corev1.Service {
	c := s.DeepCopy()
	c.ResourceVersion = rv
	return c
}

func TestRegistrySnapshotsAreImmutable(t *testing.T) {
	r := NewRegistry("cluster.local", model.NewEndpointIndex(), discardLogger())
	r.Replace(Objects{Services: []*corev1.Service{service("b", "ns", nil), service("a", "ns", nil)}})
	before := r.Services()
	if len(before) != 2 || before[0].Hostname != "a.ns.svc.cluster.local" {
		t.Fatalf("services = %v, want a then b", before)
	}
	unchanged := before[0]
	r.Replace(Objects{Services: []*corev1.Service{service("a", "ns", nil), service("c", "ns", nil)}})
	if before[1].Hostname != "b.ns.svc.cluster.local" {
		t.Fatalf("old snapshot changed: %v", before)
	}
	after := r.Services()
	if after[0] != unchanged {
		t.Fatalf("unchanged service was not reused")
	}
	if after[1].Hostname != "c.ns.svc.cluster.local" {
		t.Fatalf("services = %v, want a then c", after)
	}
}

func TestRegistryDuplicateHostFirstWins(t *testing.T) {
	r := NewRegistry("cluster.local", model.NewEndpointIndex(), discardLogger())
	first := service("web", "shop", nil)
	second := service("web", "shop", func(s *corev1.Service) { s.Spec.ClusterIP = "10.9.9.9" })
	r.Replace(Objects{Services: []*corev1.Service{first, second}})
	if got := r.Services(); len(got) != 1 || got[0].Address != "10.0.0.1" {
		t.Fatalf("services = %+v, want the first definition", got)
	}
}

func TestRegistryConcurrentUse(t *testing.T) {
	idx := model.NewEndpointIndex()
	r := NewRegistry("cluster.local", idx, discardLogger())
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				n := (w + i) % 5
				var svcs []*corev1.Service
				for j := 0; j <= n; j++ {
					svcs = append(svcs, service(fmt.Sprintf("s%d", j), "ns", nil))
				}
				r.Replace(Objects{Services: svcs})
				for _, s := range r.Services() {
					_ = s.Hostname
				}
			}
		}()
	}
	wg.Wait()
	final := []*corev1.Service{service("s0", "ns", nil)}
	r.Replace(Objects{Services: final})
	if got := r.Services(); len(got) != 1 {
		t.Fatalf("services = %v, want one", got)
	}
}
