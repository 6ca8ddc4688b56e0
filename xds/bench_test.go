package xds

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// discardStream stands in for a gRPC stream: it counts what is sent and
// discards it. Only Send, SendMsg and Context are used by the push path.
type discardStream[Req, Resp any] struct {
	grpc.ServerStream
	sends atomic.Int64
}

func (d *discardStream[Req, Resp]) Send(*Resp) error {
	d.sends.Add(1)
	return nil
}

// SendMsg takes SotW responses with a shared encoded body (sotw_encoding.go).
func (d *discardStream[Req, Resp]) SendMsg(any) error {
	d.sends.Add(1)
	return nil
}

func (d *discardStream[Req, Resp]) Recv() (*Req, error) { return nil, io.EOF }

func (d *discardStream[Req, Resp]) Context() context.Context { return context.Background() }

// benchProxy is one in-process proxy: a registered Connection and its stream.
type benchProxy struct {
	c     *Connection
	sotw  *discardStream[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	delta *discardStream[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
}

func (p *benchProxy) push(b *testing.B, req *model.PushRequest) {
	var err error
	if p.c.delta {
		err = p.c.pushDelta(p.delta, req, time.Time{})
	} else {
		err = p.c.pushSotW(p.sotw, req, time.Time{})
	}
	if err != nil {
		b.Fatal(err)
	}
}

// benchMesh is a DiscoveryServer with the real sidecar generators over
// Scale(services), with proxies connected through the real request path
// (CDS wildcard, then EDS for every EDS cluster), spread over the fixture's
// ten namespaces.
func benchMesh(b *testing.B, services, proxies int, delta bool) (*DiscoveryServer, *fakeRegistry, []*benchProxy) {
	return benchMeshCache(b, services, proxies, delta, true)
}

// benchMeshCache is benchMesh; cache=false runs without the resource cache.
func benchMeshCache(b *testing.B, services, proxies int, delta, cache bool) (*DiscoveryServer, *fakeRegistry, []*benchProxy) {
	b.Helper()
	return benchMeshWith(b, services, proxies, delta, cache, nil)
}

// benchMeshWith is benchMeshCache with a hook on the environment and the server's options.
func benchMeshWith(b *testing.B, services, proxies int, delta, cache bool, mutate func(*model.Environment, *Options)) (*DiscoveryServer, *fakeRegistry, []*benchProxy) {
	b.Helper()
	in := nt.Scale(services)
	env := in.Environment()
	reg := &fakeRegistry{}
	reg.set(env.ServiceDiscovery.Services()...)
	env.ServiceDiscovery = reg
	gens := GeneratorTable{Sidecar: map[string]model.Generator{
		model.ClusterType: cluster.Generator{}, model.EndpointType: endpoint.Generator{},
		model.ListenerType: listener.Generator{}, model.RouteType: route.Generator{},
	}}
	opts := DefaultOptions()
	// The benchmark's streams discard what is sent and never ACK: without
	// this, flow control would hold each round until ackWait ran out. Real
	// clients answer; pilot-load measures flow control with them.
	opts.MaxInflightBytes = 1 << 40
	if mutate != nil {
		mutate(env, &opts)
	}
	s := NewDiscoveryServer(env, gens, opts)
	if !cache {
		env.Cache, s.cache = nil, nil
	}
	s.MarkReady()
	return s, reg, connectBench(b, s, 0, proxies, delta)
}

// connectBench connects proxies first..first+n-1 to s.
func connectBench(b *testing.B, s *DiscoveryServer, first, n int, delta bool) []*benchProxy {
	b.Helper()
	out := make([]*benchProxy, 0, n)
	for i := first; i < first+n; i++ {
		ns := fmt.Sprintf("ns%d", i%10)
		ip := fmt.Sprintf("10.250.%d.%d", i/250, i%250+1)
		node := &corev3.Node{Id: fmt.Sprintf("sidecar~%s~client-%d.%s~%s.svc.cluster.local", ip, i, ns, ns)}
		c, err := s.connect(context.Background(), node, delta)
		if err != nil {
			b.Fatal(err)
		}
		p := &benchProxy{c: c, sotw: &discardStream[discovery.DiscoveryRequest, discovery.DiscoveryResponse]{},
			delta: &discardStream[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]{}}
		clusters, err := cluster.Build(c.proxy, s.PushContext())
		if err != nil {
			b.Fatal(err)
		}
		var eds []string
		for _, cl := range clusters {
			if cl.GetType() == clusterv3.Cluster_EDS {
				eds = append(eds, cl.GetName())
			}
		}
		if delta {
			err = c.handleDelta(p.delta, &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: model.ClusterType})
			if err == nil {
				err = c.handleDelta(p.delta, &discovery.DeltaDiscoveryRequest{TypeUrl: model.EndpointType, ResourceNamesSubscribe: eds})
			}
		} else {
			err = c.handleSotW(p.sotw, &discovery.DiscoveryRequest{Node: node, TypeUrl: model.ClusterType})
			if err == nil {
				err = c.handleSotW(p.sotw, &discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: eds})
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// pushAll runs one push round through prepareRound (cache invalidation,
// snapshot build, scoping) and pushes to every reached proxy with
// GOMAXPROCS goroutines standing in for the connections' own. It returns how many proxies
// the round reached.
func pushAll(b *testing.B, s *DiscoveryServer, byConn map[*Connection]*benchProxy, in *model.PushRequest) int {
	s.pushMu.Lock()
	req, targets := s.prepareRound(in)
	s.pushMu.Unlock()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(targets) {
					return
				}
				byConn[targets[i]].push(b, req)
			}
		})
	}
	wg.Wait()
	return len(targets)
}

// BenchmarkFullPush pushes to 1,000 in-process proxies (CDS + EDS, Delta or
// SotW) through the real push path with streams that discard what is sent:
// a change of one service (its port alternates), and a change of
// everything (a full push with no keys, as for a mesh config change). One
// op is one push round to every proxy the change reaches. The -nocache
// modes run without the resource cache, for comparison.
func BenchmarkFullPush(b *testing.B) {
	services, proxies := 100, scaled(1000, 20)
	for _, mode := range []string{"delta", "sotw", "delta-nocache", "sotw-nocache"} {
		b.Run(mode, func(b *testing.B) {
			s, reg, ps := benchMeshCache(b, services, proxies, strings.HasPrefix(mode, "delta"), !strings.HasSuffix(mode, "-nocache"))
			byConn := map[*Connection]*benchProxy{}
			for _, p := range ps {
				byConn[p.c] = p
			}
			all := reg.Services()
			b.Run("change=one-service", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					// Toggle a port of svc-50 (ns0).
					svcs := append([]*model.Service(nil), all...)
					for j, svc := range svcs {
						if svc.Name == "svc-50" {
							cp := *svc
							cp.Ports = append([]model.Port(nil), svc.Ports...)
							cp.Ports[0].Port = uint32(8080 + i%2)
							svcs[j] = &cp
							i++
							req := model.NewPushRequest(true, model.ReasonServiceUpdate, model.ConfigKey{Kind: model.KindService, Name: cp.Hostname, Namespace: cp.Namespace})
							reg.set(svcs...)
							if n := pushAll(b, s, byConn, req); n != proxies {
								b.Fatalf("push reached %d proxies, want %d", n, proxies)
							}
						}
					}
				}
			})
			b.Run("change=everything", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					pushAll(b, s, byConn, model.NewPushRequest(true, model.ReasonGlobalUpdate))
				}
			})
		})
	}
}

// BenchmarkDeltaConnectionBytes reports the live heap each Delta connection
// adds (CDS wildcard + EDS for every EDS cluster, services=1000, ~3,500
// resources) once the shared cache is warm: the per-connection state.
func BenchmarkDeltaConnectionBytes(b *testing.B) {
	services, proxies := scaled(1000, 50), scaled(100, 5)
	s, _, _ := benchMesh(b, services, 10, true)
	next := 10
	for b.Loop() {
		before := liveHeap()
		ps := connectBench(b, s, next, proxies, true)
		after := liveHeap()
		next += proxies
		resources := 0
		for _, p := range ps {
			p.c.mu.Lock()
			for _, ws := range p.c.watches {
				resources += ws.sent.len()
			}
			p.c.mu.Unlock()
		}
		b.ReportMetric(float64(after-before)/float64(proxies), "heap-B/conn")
		b.ReportMetric(float64(resources)/float64(proxies), "resources/conn")
		runtime.KeepAlive(ps)
	}
}

// scaled is n, or small under -short: make test runs every benchmark once
// with -short under the race detector, to show it still works, not to
// measure it (make bench measures, without -short).
func scaled(n, small int) int {
	if testing.Short() {
		return small
	}
	return n
}
