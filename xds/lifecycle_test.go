package xds

import (
	"runtime"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/model"
)

func TestManyStreamsLeaveNoGoroutines(t *testing.T) {
	h := newHarness(t, true)
	// Warm the client connection so its goroutines are in the baseline.
	warm, _ := initialCDS(h, "warm")
	warm.cancel()
	eventually(t, "warm-up connection gone", func() bool { return len(h.s.SyncStatus()) == 0 })
	baseline := runtime.NumGoroutine()

	// 200 streams, half SotW and half Delta, all connected at once.
	const n = 100
	clients := make([]*sotwClient, 0, n)
	deltas := make([]*deltaClient, 0, n)
	for i := range n {
		c := h.sotw()
		c.send(&discovery.DiscoveryRequest{Node: testNode("p"+strings.Repeat("x", i%3), nil), TypeUrl: model.ClusterType})
		clients = append(clients, c)
		d := h.delta()
		d.send(&discovery.DeltaDiscoveryRequest{Node: testNode("d", nil), TypeUrl: model.ClusterType})
		deltas = append(deltas, d)
	}
	for i := range n {
		clients[i].recvType(model.ClusterType)
		deltas[i].recv(model.ClusterType)
	}
	if got := len(h.s.SyncStatus()); got != 2*n {
		t.Fatalf("%d connections, want %d", got, 2*n)
	}
	h.reg.set(service("a", 80))
	h.fullPush()
	for i := range n {
		clients[i].recvType(model.ClusterType)
		if r := deltas[i].recv(model.ClusterType); len(r.GetRemovedResources()) != 1 {
			t.Fatalf("delta push removed %v", r.GetRemovedResources())
		}
	}
	for i := range n {
		clients[i].cancel()
		deltas[i].cancel()
	}
	eventually(t, "connections gone", func() bool { return len(h.s.SyncStatus()) == 0 })
	eventually(t, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= baseline })
	if got := value(t, h.metrics.XDSClients.WithLabelValues("1.31.1")); got != 0 {
		t.Fatalf("pilot_xds = %v after all disconnected", got)
	}
}

func TestRunReturnsAndEndsStreamsWhenCancelled(t *testing.T) {
	h := newHarness(t, true)
	c, _ := initialCDS(h, "pod1")
	h.stopRun()
	if err := c.streamErr(); status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable", err)
	}
	select {
	case <-h.ran:
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return")
	}
	eventually(t, "connection gone", func() bool { return len(h.s.SyncStatus()) == 0 })
	// New streams are refused once Run has returned.
	late := h.sotw()
	late.send(&discovery.DiscoveryRequest{Node: testNode("late", nil), TypeUrl: model.ClusterType})
	if err := late.streamErr(); status.Code(err) != codes.Unavailable {
		t.Fatalf("late stream got %v, want Unavailable", err)
	}
}

// panicGen panics, standing in for a bug in a generator.
type panicGen struct{}

func (panicGen) Generate(*model.Proxy, *model.PushContext, *model.WatchedResource, *model.PushRequest) (model.Resources, error) {
	panic("generator bug")
}

func TestPanicEndsOnlyItsStream(t *testing.T) {
	h := newHarness(t, true, func(_ *model.Environment, g *GeneratorTable) {
		g.Sidecar[model.SecretType] = panicGen{}
	})
	good, _ := initialCDS(h, "good")
	bad, _ := initialCDS(h, "bad")
	bad.send(&discovery.DiscoveryRequest{TypeUrl: model.SecretType, ResourceNames: []string{"default"}})
	if err := bad.streamErr(); status.Code(err) != codes.Internal {
		t.Fatalf("got %v, want Internal", err)
	}
	eventually(t, "panicked connection gone", func() bool { return len(h.s.SyncStatus()) == 1 })
	good.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	good.recvType(model.EndpointType)
}

func TestPushOrderCDSBeforeEDS(t *testing.T) {
	h := newHarness(t, true)
	c := h.sotw()
	// Subscribe EDS first: pushes still send CDS before EDS.
	c.send(&discovery.DiscoveryRequest{Node: testNode("pod1", nil), TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	c.recvType(model.EndpointType)
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.ClusterType})
	c.recvType(model.ClusterType)
	h.fullPush()
	c.recvType(model.ClusterType)
	c.recvType(model.EndpointType)
}

func TestGeneratorTableAndOrder(t *testing.T) {
	table := GeneratorTable{
		Sidecar: map[string]model.Generator{model.ClusterType: cdsGen{}},
		GRPC:    map[string]model.Generator{model.ListenerType: cdsGen{prefix: "g"}},
	}
	sidecar := &model.Proxy{}
	grpcProxy := &model.Proxy{Metadata: model.NodeMetadata{Generator: model.GeneratorGRPC}}
	if table.Generator(sidecar, model.ClusterType) == nil || table.Generator(sidecar, model.ListenerType) != nil {
		t.Error("sidecar table not used for sidecars")
	}
	if table.Generator(grpcProxy, model.ClusterType) != nil || table.Generator(grpcProxy, model.ListenerType) == nil {
		t.Error("gRPC table not used for GENERATOR=grpc, or fell back to the sidecar table")
	}
	got := orderTypes([]string{"z", model.RouteType, model.SecretType, model.ListenerType, model.EndpointType, model.ClusterType})
	want := []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType, model.SecretType, "z"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("order = %v, want %v", got, want)
	}
}
