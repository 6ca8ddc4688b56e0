package gateway_test

import (
	"testing"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
)

// benchGateway runs gen for the ingress gateway over Bookinfo with
// bookinfo-gateway.yaml and testdata/tcp.yaml (4 listeners, route
// http.8080), marshalling included, with a cold cache (emptied before each
// generation) and a warm one (filled by another pod of the Deployment).
func benchGateway(b *testing.B, gen model.Generator, w *model.WatchedResource) {
	in, _ := cachedBookinfo(b)
	push := in.PushContext()
	proxy := pod("ingress-a", "10.244.1.1")
	run := func(b *testing.B, cold bool) {
		b.ReportAllocs()
		if _, err := gen.Generate(pod("ingress-b", "10.244.1.2"), push, w, nil); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if cold {
				in.Cache.Clear()
			}
			res, err := gen.Generate(proxy, push, w, nil)
			if err != nil || len(res) == 0 {
				b.Fatalf("generate: %d resources, %v", len(res), err)
			}
		}
	}
	b.Run("cache=cold", func(b *testing.B) { run(b, true) })
	b.Run("cache=warm", func(b *testing.B) { run(b, false) })
}

func BenchmarkGatewayLDS(b *testing.B) {
	benchGateway(b, gateway.ListenerGenerator{}, &model.WatchedResource{TypeURL: model.ListenerType, Wildcard: true})
}

func BenchmarkGatewayRDS(b *testing.B) {
	benchGateway(b, gateway.RouteGenerator{}, &model.WatchedResource{
		TypeURL: model.RouteType, ResourceNames: map[string]struct{}{"http.8080": {}},
	})
}
