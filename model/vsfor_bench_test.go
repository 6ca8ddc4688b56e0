package model

import (
	"fmt"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

// BenchmarkVirtualServicesFor looks up the VirtualServices of each of 1,000
// services for a proxy: one VirtualService per host (the common case), and
// three per host (a producer's, one exported to the proxy's namespace, and
// a consumer's private one), which sortByExport orders.
func BenchmarkVirtualServicesFor(b *testing.B) {
	for _, perHost := range []int{1, 3} {
		b.Run(fmt.Sprintf("perHost=%d", perHost), func(b *testing.B) {
			env := syntheticEnv(1000)
			store := env.ConfigStore.(fakeStore)
			if perHost == 3 {
				var extra []Config
				for i, c := range store[KindVirtualService] {
					host := c.Spec.(*networking.VirtualService).GetHosts()[0]
					extra = append(extra,
						Config{Meta: Meta{Kind: KindVirtualService, Name: fmt.Sprintf("to-ns0-%d", i), Namespace: c.Namespace}, Spec: &networking.VirtualService{Hosts: []string{host}, ExportTo: []string{"ns0"}}},
						Config{Meta: Meta{Kind: KindVirtualService, Name: fmt.Sprintf("consumer-%d", i), Namespace: "ns0"}, Spec: &networking.VirtualService{Hosts: []string{host}, ExportTo: []string{"."}}})
				}
				store[KindVirtualService] = append(store[KindVirtualService], extra...)
			}
			pc := NewPushContext(env, nil, nil)
			proxy := &Proxy{Namespace: "ns0"}
			svcs := pc.Services()
			b.ResetTimer()
			for range b.N {
				for _, s := range svcs {
					if len(pc.VirtualServicesFor(proxy, s.Hostname)) != perHost {
						b.Fatalf("%s: want %d VirtualServices", s.Hostname, perHost)
					}
				}
			}
		})
	}
}
