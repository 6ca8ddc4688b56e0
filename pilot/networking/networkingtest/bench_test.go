package networkingtest_test

import (
	"fmt"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	"github.com/meshpilot/meshpilot/pilot/networking/nametable"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// benchGenerator runs gen for ScaleProxy over Scale(n) for n = 100 and 1000,
// including marshalling every resource to an Any, with a cold cache (emptied
// before every generation: every resource is built, marshalled and stored)
// and a warm one (filled by the other proxies of a push: every shared
// resource is a cache hit). watched builds the subscription from the push
// context (outside the timer).
func benchGenerator(b *testing.B, gen model.Generator, watched func(*testing.B, *model.PushContext) *model.WatchedResource) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			in := nt.Scale(n)
			benchColdWarm(b, &in, gen, watched)
		})
	}
}

func wildcard(typeURL string) func(*testing.B, *model.PushContext) *model.WatchedResource {
	return func(*testing.B, *model.PushContext) *model.WatchedResource {
		return &model.WatchedResource{TypeURL: typeURL, Wildcard: true}
	}
}

func BenchmarkCDS(b *testing.B) { benchGenerator(b, cluster.Generator{}, wildcard(model.ClusterType)) }

func BenchmarkLDS(b *testing.B) {
	benchGenerator(b, listener.Generator{}, wildcard(model.ListenerType))
}

func BenchmarkEDS(b *testing.B) { benchGenerator(b, endpoint.Generator{}, edsWatch) }

// BenchmarkEDSWithCluster is BenchmarkEDS with every endpoint read from a
// cluster, as the Kubernetes registries write them (ClusterID and Workload
// set): the cost of istiod's istio.workload endpoint metadata.
func BenchmarkEDSWithCluster(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			in := nt.Scale(n)
			for host, eps := range in.Endpoints {
				withCluster := make([]*model.Endpoint, len(eps))
				for i, e := range eps {
					c := *e
					c.ClusterID, c.Workload = "cluster-1", c.Labels["app"]+"-"+c.Labels["version"]
					withCluster[i] = &c
				}
				in.Endpoints[host] = withCluster
			}
			benchColdWarm(b, &in, endpoint.Generator{}, edsWatch)
		})
	}
}

// BenchmarkEDSReplicas is BenchmarkEDSWithCluster with three replicas of
// each workload (the same labels and Deployment at three addresses), as
// Deployments run them: replicas share their endpoint metadata.
func BenchmarkEDSReplicas(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			in := nt.Scale(n)
			for host, eps := range in.Endpoints {
				var out []*model.Endpoint
				for _, e := range eps {
					for r := range 3 {
						c := *e
						c.ClusterID, c.Workload = "cluster-1", c.Labels["app"]+"-"+c.Labels["version"]
						c.Address = fmt.Sprintf("%s%d", e.Address, r)
						out = append(out, &c)
					}
				}
				in.Endpoints[host] = out
			}
			benchColdWarm(b, &in, endpoint.Generator{}, edsWatch)
		})
	}
}

// edsWatch subscribes to every EDS cluster CDS gives ScaleProxy.
func edsWatch(b *testing.B, push *model.PushContext) *model.WatchedResource {
	clusters, err := cluster.Build(nt.ScaleProxy(), push)
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for _, c := range clusters {
		if c.GetType() == clusterv3.Cluster_EDS {
			names = append(names, c.GetName())
		}
	}
	return watch(model.EndpointType, names)
}

// BenchmarkNDS is the DNS name table (cached per namespace and Sidecar).
func BenchmarkNDS(b *testing.B) {
	g, err := nametable.New()
	if err != nil {
		b.Fatal(err)
	}
	benchGenerator(b, g, wildcard(model.NameTableType))
}

func BenchmarkRDS(b *testing.B) {
	benchGenerator(b, route.Generator{}, func(*testing.B, *model.PushContext) *model.WatchedResource {
		return watch(model.RouteType, []string{"8080"})
	})
}

// BenchmarkLDSEnvoyFilter is BenchmarkLDS at 1,000 services with two
// EnvoyFilters selecting the proxy: a Lua filter before every router (ns0,
// workloadSelector) and a mesh-wide HTTP_FILTER INSERT_FIRST (root
// namespace). Cold: every listener is built, patched, validated and
// marshalled; warm: the patched listeners come from the cache.
func BenchmarkLDSEnvoyFilter(b *testing.B) {
	in := nt.Scale(1000)
	in.Configs = append(in.Configs, scaleEnvoyFilter(b, "envoy.lua", "1"), meshWideFilter(b))
	b.Run("services=1000", func(b *testing.B) {
		benchColdWarm(b, &in, listener.Generator{}, wildcard(model.ListenerType))
	})
}

// benchColdWarm runs gen for one scale proxy over in, with a cold cache
// (cleared before each call) and a warm one, as cache=cold and cache=warm.
func benchColdWarm(b *testing.B, in *nt.Input, gen model.Generator, watched func(*testing.B, *model.PushContext) *model.WatchedResource) {
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	push := in.PushContext()
	proxy := nt.ScaleProxy()
	w := watched(b, push)
	req := &model.PushRequest{Full: true}
	run := func(b *testing.B, cold bool) {
		b.ReportAllocs()
		if _, err := gen.Generate(proxy, push, w, req); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if cold {
				in.Cache.Clear()
			}
			res, err := gen.Generate(proxy, push, w, req)
			if err != nil || len(res) == 0 {
				b.Fatalf("generate: %d resources, %v", len(res), err)
			}
		}
	}
	b.Run("cache=cold", func(b *testing.B) { run(b, true) })
	b.Run("cache=warm", func(b *testing.B) { run(b, false) })
}

// BenchmarkLDSOtherService is warm LDS at 1,000 services for proxies of
// ever new canonical services in one namespace, as when the pods of many
// Deployments connect: with tracing on (Istio's default) each service's
// span tags make its HTTP listeners its own, while its TCP listeners come
// from the cache. cache-entries/op is what each new service adds.
func BenchmarkLDSOtherService(b *testing.B) {
	in := nt.Scale(1000)
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	push := in.PushContext()
	w := wildcard(model.ListenerType)(b, push)
	req := &model.PushRequest{Full: true}
	gen := listener.Generator{}
	proxy := func(i int) *model.Proxy {
		app := fmt.Sprintf("client-%d", i)
		return nt.Proxy(fmt.Sprintf("10.201.%d.%d", i/250, i%250+1), app+"-pod", "ns0",
			map[string]string{"app": app, "service.istio.io/canonical-name": app})
	}
	if _, err := gen.Generate(proxy(0), push, w, req); err != nil {
		b.Fatal(err)
	}
	before := in.Cache.Len()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if res, err := gen.Generate(proxy(i), push, w, req); err != nil || len(res) == 0 {
			b.Fatalf("generate: %d resources, %v", len(res), err)
		}
	}
	b.ReportMetric(float64(in.Cache.Len()-before)/float64(i), "cache-entries/op")
}
