package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestDerivedScopesEqualRebuilt: after random changes of a few services
// (added, redefined with another exportTo, removed), the scopes a
// PushContext derives from its predecessor's are those a fresh build
// computes, for proxies with and without a Sidecar.
func TestDerivedScopesEqualRebuilt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	namespaces := []string{"a", "b", "c", "istio-system"}
	exports := [][]string{nil, {"."}, {"*"}, {"b"}}
	var services []*Service
	for i := range 40 {
		services = append(services, scopeService(fmt.Sprintf("s%d", i), namespaces[i%3], exports[i%4]...))
	}
	sidecars := []Config{sidecar("a", "default", nil, "./*", "istio-system/*"), sidecar("b", "sel", map[string]string{"app": "x"}, "*/s1*")}
	store := scopeStore{KindSidecar: sidecars}
	sorted := func(svcs []*Service) []*Service {
		out := slices.Clone(svcs)
		slices.SortFunc(out, func(a, b *Service) int { return strings.Compare(a.Hostname, b.Hostname) })
		return out
	}
	env := &Environment{ServiceDiscovery: scopeServices(sorted(services)), ConfigStore: store, Endpoints: NewEndpointIndex(), DomainSuffix: "cluster.local"}
	proxies := []*Proxy{scopeProxy("a", nil), scopeProxy("b", map[string]string{"app": "x"}), scopeProxy("b", nil), scopeProxy("c", nil)}
	prev := NewPushContext(env, nil, nil)
	for step := range 30 {
		for _, p := range proxies {
			prev.SidecarScope(p) // cache the scopes, as a push does
		}
		var keys []ConfigKey
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(services) + 1)
			switch {
			case i == len(services): // add
				s := scopeService(fmt.Sprintf("n%d", step), namespaces[rng.IntN(3)], exports[rng.IntN(4)]...)
				services = append(services, s)
				keys = append(keys, ConfigKey{Kind: KindService, Name: s.Hostname, Namespace: s.Namespace})
			case rng.IntN(3) == 0: // remove
				keys = append(keys, ConfigKey{Kind: KindService, Name: services[i].Hostname, Namespace: services[i].Namespace})
				services = slices.Delete(services, i, i+1)
			default: // redefine
				s := *services[i]
				s.ExportTo = exports[rng.IntN(4)]
				services[i] = &s
				keys = append(keys, ConfigKey{Kind: KindService, Name: s.Hostname, Namespace: s.Namespace})
			}
		}
		env.ServiceDiscovery = scopeServices(sorted(services))
		next := NewPushContext(env, prev, NewPushRequest(true, ReasonServiceUpdate, keys...))
		fresh := NewPushContext(env, nil, nil)
		for _, p := range proxies {
			got, want := next.SidecarScope(p), fresh.SidecarScope(p)
			if !slices.Equal(got.Services(), want.Services()) {
				t.Fatalf("step %d, proxy of %s: derived scope %v, rebuilt %v", step, p.Namespace, hosts(got.Services()), hosts(want.Services()))
			}
			for _, s := range want.Services() {
				if got.Service(s.Hostname) != s {
					t.Fatalf("step %d: derived scope's Service(%s) differs", step, s.Hostname)
				}
			}
			if len(got.byHost) != len(want.byHost) || got.push != next {
				t.Fatalf("step %d: derived scope has %d hosts by name (want %d) or another snapshot", step, len(got.byHost), len(want.byHost))
			}
		}
		prev = next
	}
}
