package model

import (
	"fmt"
	"slices"
	"testing"
)

func TestIncrementalServiceIndexEqualsRebuild(t *testing.T) {
	env := syntheticEnv(50)
	prev := NewPushContext(env, nil, nil)
	svcs := slices.Clone(prev.Services())
	// Change svc7, remove svc8, add a new one (and a shadowed duplicate: first wins).
	changed := *svcs[slices.IndexFunc(svcs, func(s *Service) bool { return s.Name == "svc7" })]
	changed.Address = "10.99.0.1"
	var next []*Service
	for _, s := range svcs {
		switch s.Name {
		case "svc7":
			next = append(next, &changed)
		case "svc8":
		default:
			next = append(next, s)
		}
	}
	added := &Service{Hostname: "new.ns1.svc.cluster.local", Namespace: "ns1", Name: "new"}
	shadow := &Service{Hostname: added.Hostname, Namespace: "ns1", Name: "shadow"}
	next = append(next, added, shadow)
	env.ServiceDiscovery = fakeRegistry(next)
	gone := svcs[slices.IndexFunc(svcs, func(s *Service) bool { return s.Name == "svc8" })]
	req := NewPushRequest(true, ReasonServiceUpdate,
		ConfigKey{Kind: KindService, Name: changed.Hostname, Namespace: changed.Namespace},
		ConfigKey{Kind: KindService, Name: gone.Hostname, Namespace: gone.Namespace},
		ConfigKey{Kind: KindService, Name: added.Hostname, Namespace: added.Namespace})

	patched := NewPushContext(env, prev, req)
	rebuilt := NewPushContext(env, nil, nil)
	if !slices.Equal(patched.Services(), rebuilt.Services()) {
		t.Fatalf("patched index %v\nrebuilt %v", hosts(patched.Services()), hosts(rebuilt.Services()))
	}
	for _, s := range rebuilt.Services() {
		if patched.ServiceByHost(s.Hostname) != s {
			t.Errorf("ServiceByHost(%s) differs", s.Hostname)
		}
	}
	if patched.ServiceByHost(gone.Hostname) != nil || patched.ServiceByHost(added.Hostname) != added {
		t.Error("removed or added service wrong in the host index")
	}
	// Copy on write: the previous snapshot is unchanged.
	if !slices.Equal(prev.Services(), svcs) || prev.ServiceByHost(gone.Hostname) != gone || prev.ServiceByHost(added.Hostname) != nil {
		t.Error("patching changed the previous PushContext")
	}
}

func hosts(svcs []*Service) []string {
	out := make([]string, len(svcs))
	for i, s := range svcs {
		out[i] = s.Hostname
	}
	return out
}

// BenchmarkPushContextOneService measures the snapshot build for a change
// of one service: the service index is patched, the rest reused.
func BenchmarkPushContextOneService(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			env := syntheticEnv(n)
			prev := NewPushContext(env, nil, nil)
			s := prev.Services()[n/2]
			req := NewPushRequest(true, ReasonServiceUpdate, ConfigKey{Kind: KindService, Name: s.Hostname, Namespace: s.Namespace})
			b.ReportAllocs()
			for b.Loop() {
				NewPushContext(env, prev, req)
			}
		})
	}
}
