package networkingtest_test

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// BenchmarkEDSNetworks is cold EDS (every assignment built and
// marshalled) at 1,000 services for a proxy on network n1, each service
// with one endpoint per port on n1 and one on n2 (with a sidecar):
// networks=1 has no gateways (every endpoint direct, the split is off),
// networks=2 has one gateway for n2 (split-horizon: n2's endpoints become
// the gateway's).
func BenchmarkEDSNetworks(b *testing.B) {
	for _, tc := range []struct {
		name     string
		networks *meshconfig.MeshNetworks
	}{
		{"networks=1", nil},
		{"networks=2", &meshconfig.MeshNetworks{Networks: map[string]*meshconfig.Network{"n2": {
			Gateways: []*meshconfig.Network_IstioNetworkGateway{
				{Gw: &meshconfig.Network_IstioNetworkGateway_Address{Address: "192.0.2.1"}, Port: 15443},
			},
		}}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			in := nt.Scale(1000)
			for _, eps := range in.Endpoints {
				for _, e := range eps {
					e.Network = "n1"
					if e.Labels["version"] == "v2" {
						e.Network = "n2"
						e.Labels[cluster.TLSModeLabel] = cluster.TLSModeIstio
					}
				}
			}
			in.MeshNetworks = tc.networks
			in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
			push := in.PushContext()
			proxy := nt.ScaleProxy()
			proxy.Metadata.Network = "n1"
			clusters, err := cluster.Build(proxy, push)
			if err != nil {
				b.Fatal(err)
			}
			var names []string
			for _, c := range clusters {
				if c.GetType() == clusterv3.Cluster_EDS {
					names = append(names, c.GetName())
				}
			}
			w := watch(model.EndpointType, names)
			gen := endpoint.Generator{}
			b.ReportAllocs()
			for b.Loop() {
				in.Cache.Clear()
				res, err := gen.Generate(proxy, push, w, nil)
				if err != nil || len(res) != len(names) {
					b.Fatalf("generate: %d resources for %d clusters, %v", len(res), len(names), err)
				}
			}
		})
	}
}
