package model

import (
	"fmt"
	"testing"
)

// BenchmarkScopesAfterOneService measures, at 30k services over 100
// namespaces each with a "./*" Sidecar, the snapshot build for a change of
// one service plus the SidecarScopes of the 100 namespaces (what the push
// that follows computes).
func BenchmarkScopesAfterOneService(b *testing.B) {
	const n, namespaces = 30000, 100
	services := make([]*Service, 0, n)
	var configs []Config
	proxies := make([]*Proxy, namespaces)
	for i := range namespaces {
		ns := fmt.Sprintf("ns-%d", i)
		configs = append(configs, sidecar(ns, "default", nil, "./*", "istio-system/*"))
		proxies[i] = scopeProxy(ns, nil)
	}
	for i := range n {
		services = append(services, scopeService(fmt.Sprintf("svc-%d", i), fmt.Sprintf("ns-%d", i%namespaces)))
	}
	prev := scopePush(b, services, configs...)
	for _, p := range proxies {
		prev.SidecarScope(p)
	}
	env := &Environment{ServiceDiscovery: scopeServices(prev.Services()), ConfigStore: scopeStore{KindSidecar: prev.Sidecars()},
		Endpoints: NewEndpointIndex(), DomainSuffix: "cluster.local"}
	s := prev.Services()[n/2]
	req := NewPushRequest(true, ReasonServiceUpdate, ConfigKey{Kind: KindService, Name: s.Hostname, Namespace: s.Namespace})
	b.ReportAllocs()
	for b.Loop() {
		pc := NewPushContext(env, prev, req)
		for _, p := range proxies {
			pc.SidecarScope(p)
		}
	}
}
