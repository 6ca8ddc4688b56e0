package xds

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	"github.com/meshpilot/meshpilot/pilot/networking/nametable"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// bigHost is the service of 1,000 pods the headless benchmarks compare.
const bigHost = "big.ns0.svc.cluster.local"

// bigShard is the EndpointIndex shard the benchmarks write, as the
// Kubernetes registry does.
const bigShard = "Kubernetes"

// bigMesh is a DiscoveryServer with the real sidecar generators (CDS, EDS,
// LDS, RDS, NDS) over Scale(20) plus one service "big" in ns0 with ports
// http 8080 and tcp 9000 and pods endpoints (StatefulSet-like pods with
// host names): headless (no address, resolution NONE) or ClusterIP.
type bigMesh struct {
	s       *DiscoveryServer
	env     *model.Environment
	svc     *model.Service
	eps     []*model.Endpoint
	byConn  map[*Connection]*benchProxy
	proxies []*benchProxy
}

func newBigMesh(b *testing.B, headless bool, pods, proxies int) *bigMesh {
	b.Helper()
	in := nt.Scale(20)
	svc := nt.KubeService("big", "ns0", "10.99.0.1", model.Port{Name: "http", Port: 8080}, model.Port{Name: "tcp", Port: 9000})
	if headless {
		svc.Address, svc.Resolution = "", model.Passthrough
	}
	in.Services = append(in.Services, svc)
	env := in.Environment()
	m := &bigMesh{env: env, svc: svc, byConn: map[*Connection]*benchProxy{}}
	for i := range pods {
		ip := fmt.Sprintf("10.98.%d.%d", i/250, i%250+1)
		for _, p := range svc.Ports {
			e := nt.Endpoint(ip, p.Port, p.Name, map[string]string{"app": "big"})
			e.Namespace, e.ServiceAccount, e.WorkloadName, e.HostName = "ns0", "big", fmt.Sprintf("big-%d", i), fmt.Sprintf("big-%d", i)
			m.eps = append(m.eps, e)
		}
	}
	m.apply(b)
	reg := &fakeRegistry{}
	reg.set(env.ServiceDiscovery.Services()...)
	env.ServiceDiscovery = reg
	nds, err := nametable.New()
	if err != nil {
		b.Fatal(err)
	}
	gens := GeneratorTable{Sidecar: map[string]model.Generator{
		model.ClusterType: cluster.Generator{}, model.EndpointType: endpoint.Generator{},
		model.ListenerType: listener.Generator{}, model.RouteType: route.Generator{}, model.NameTableType: nds,
	}}
	opts := DefaultOptions()
	opts.MaxInflightBytes = 1 << 40 // the discard streams never ACK (see benchMeshWith)
	m.s = NewDiscoveryServer(env, gens, opts)
	m.s.MarkReady()
	m.proxies = connectBench(b, m.s, 0, proxies, false)
	for _, p := range m.proxies {
		m.byConn[p.c] = p
		for _, typeURL := range []string{model.ListenerType, model.NameTableType} {
			if err := p.c.handleSotW(p.sotw, &discovery.DiscoveryRequest{TypeUrl: typeURL}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return m
}

// apply writes m.eps into the index as the Kubernetes registry does and
// returns the request the kube source would hand the server.
func (m *bigMesh) apply(b *testing.B) *model.PushRequest {
	b.Helper()
	svcs := map[string]*model.Service{m.svc.Hostname: m.svc}
	ch := model.ApplyRegistryState(m.env.Endpoints, bigShard, svcs, svcs, map[string][]*model.Endpoint{m.svc.Hostname: m.eps})
	if ch.Empty() {
		return nil
	}
	req := &model.PushRequest{ConfigsUpdated: map[model.ConfigKey]struct{}{}, Reason: map[model.TriggerReason]int{}}
	for _, k := range ch.Services {
		req.Full = true
		req.ConfigsUpdated[k] = struct{}{}
		req.Reason[model.ReasonServiceUpdate]++
	}
	for _, k := range ch.Endpoints {
		req.ConfigsUpdated[k] = struct{}{}
		req.Reason[model.ReasonEndpointUpdate]++
	}
	return req
}

// togglePod flips the readiness of pod i (both its ports), as a pod that
// turns not ready and back does.
func (m *bigMesh) togglePod(i int) {
	m.eps = slices.Clone(m.eps)
	for j := range m.svc.Ports {
		k := i*len(m.svc.Ports) + j
		e := *m.eps[k]
		e.Healthy = !e.Healthy
		m.eps[k] = &e
	}
}

// BenchmarkHeadlessVsClusterIP compares one headless Service of 1,000 pods
// with a ClusterIP Service of the same pods and ports (istio/istio#33969):
// the PushContext build, each sidecar type's generation without the
// resource cache, and the push round one pod's readiness change causes
// (registry classification, cache invalidation, snapshot if full, and
// generation and sending to every reached proxy of 200, which watch CDS,
// EDS, LDS and NDS). The push reports how many rounds were full and the
// live heap of the whole server once warm.
func BenchmarkHeadlessVsClusterIP(b *testing.B) {
	pods, proxies := scaled(1000, 50), scaled(200, 10)
	for _, mode := range []string{"clusterip", "headless"} {
		b.Run("svc="+mode, func(b *testing.B) {
			m := newBigMesh(b, mode == "headless", pods, proxies)
			proxy := m.proxies[0].c.proxy
			b.Run("op=pushcontext", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					model.NewPushContext(m.env, nil, nil)
				}
			})
			push := m.s.PushContext()
			var edsNames []string
			clusters, err := cluster.Build(proxy, push)
			if err != nil {
				b.Fatal(err)
			}
			for _, cl := range clusters {
				if cl.GetType() == clusterv3.Cluster_EDS {
					edsNames = append(edsNames, cl.GetName())
				}
			}
			for _, typeURL := range []string{model.ClusterType, model.EndpointType, model.ListenerType, model.NameTableType} {
				w := &model.WatchedResource{TypeURL: typeURL, Wildcard: true}
				if typeURL == model.EndpointType {
					w = &model.WatchedResource{TypeURL: typeURL, ResourceNames: map[string]struct{}{}}
					for _, n := range edsNames {
						w.ResourceNames[n] = struct{}{}
					}
				}
				gen := m.s.gens.Sidecar[typeURL]
				b.Run("op=generate/type="+model.ShortType(typeURL), func(b *testing.B) {
					// Without the cache: the cost of building, per proxy.
					cache := m.env.Cache
					m.env.Cache = nil
					pc := model.NewPushContext(m.env, nil, nil)
					m.env.Cache = cache
					b.ReportAllocs()
					for b.Loop() {
						if _, err := gen.Generate(proxy, pc, w, nil); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			b.Run("op=pod-change", func(b *testing.B) {
				b.ReportAllocs()
				full, reached, i := 0, 0, 0
				for b.Loop() {
					m.togglePod(i % pods)
					i++
					req := m.apply(b)
					if req == nil {
						b.Fatal("a readiness change changed nothing")
					}
					if req.Full {
						full++
					}
					reached += pushAll(b, m.s, m.byConn, req)
				}
				b.ReportMetric(float64(full)/float64(i), "full/op")
				b.ReportMetric(float64(reached)/float64(i), "proxies/op")
				b.ReportMetric(float64(liveHeap()), "heap-B")
				runtime.KeepAlive(m)
			})
		})
	}
}
