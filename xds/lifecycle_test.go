package xds

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/model"
)

// liveHeap returns the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// streamWave opens perWave SotW and perWave Delta streams at once, gets
// their initial CDS and one push, closes them and waits until the server
// dropped them.
func streamWave(t *testing.T, h *harness, wave, perWave int) {
	t.Helper()
	// One context per wave (no per-stream test cleanups to skew the heap).
	waveCtx, endWave := context.WithCancel(context.Background())
	defer endWave()
	open := func() (context.Context, context.CancelFunc) { return context.WithCancel(waveCtx) }
	clients := make([]*sotwClient, 0, perWave)
	deltas := make([]*deltaClient, 0, perWave)
	for i := range perWave {
		c := h.sotwIn(open())
		c.send(&discovery.DiscoveryRequest{Node: testNode("p"+strings.Repeat("x", i%3), nil), TypeUrl: model.ClusterType})
		clients = append(clients, c)
		d := h.deltaIn(open())
		d.send(&discovery.DeltaDiscoveryRequest{Node: testNode("d", nil), TypeUrl: model.ClusterType})
		deltas = append(deltas, d)
	}
	for i := range perWave {
		clients[i].recvType(model.ClusterType)
		deltas[i].recv(model.ClusterType)
	}
	if got := len(h.s.SyncStatus()); got != 2*perWave {
		t.Fatalf("wave %d: %d connections, want %d", wave, got, 2*perWave)
	}
	// Alternate between one and two services: every push changes something.
	if wave%2 == 0 {
		h.reg.set(service("a", 80))
	} else {
		h.reg.set(service("a", 80), service("b", 80))
	}
	h.fullPush()
	for i := range perWave {
		clients[i].recvType(model.ClusterType)
		r := deltas[i].recv(model.ClusterType)
		if len(r.GetRemovedResources())+len(r.GetResources()) != 1 {
			t.Fatalf("wave %d: delta push sent %v, removed %v", wave, deltaNames(r), r.GetRemovedResources())
		}
	}
	for i := range perWave {
		clients[i].cancel()
		deltas[i].cancel()
	}
	eventually(t, "connections gone", func() bool { return len(h.s.SyncStatus()) == 0 })
}

// TestManyStreamsLeaveNoGoroutines connects and disconnects 1,000 streams,
// half SotW and half Delta, in waves of 250 open at once (each gets its
// initial CDS and one push), and checks the goroutine count and the live
// heap return to their baseline.
func TestManyStreamsLeaveNoGoroutines(t *testing.T) {
	h := newHarness(t, true)
	const waves, perWave = 4, 125
	// A warm-up wave puts the client connection's and server's goroutines,
	// pools and grown maps into the baseline.
	streamWave(t, h, 0, perWave)
	baseline := runtime.NumGoroutine()
	baseHeap := liveHeap()

	for wave := 1; wave <= waves; wave++ {
		streamWave(t, h, wave, perWave)
	}
	eventually(t, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= baseline })
	if got := value(t, h.metrics.XDSClients.WithLabelValues("1.31.1")); got != 0 {
		t.Fatalf("pilot_xds = %v after all disconnected", got)
	}
	// 1 MiB is far below what 1,000 leaked connections would hold (each
	// keeps goroutine stacks, gRPC stream state and watches: >10 MiB in all).
	const margin = 1 << 20
	heap := liveHeap()
	for deadline := time.Now().Add(waitTimeout); heap > baseHeap+margin; heap = liveHeap() {
		if time.Now().After(deadline) {
			t.Fatalf("live heap %d KiB, baseline %d KiB: more than %d KiB left after 1,000 streams", heap>>10, baseHeap>>10, margin>>10)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("goroutines %d (baseline %d); live heap %d KiB (baseline %d KiB)", runtime.NumGoroutine(), baseline, heap>>10, baseHeap>>10)
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
	// The server may end the stream before the request is written: then
	// Send reports io.EOF and the status comes from Recv.
	if err := late.stream.Send(&discovery.DiscoveryRequest{Node: testNode("late", nil), TypeUrl: model.ClusterType}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("send: %v", err)
	}
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
	// A change to both types: a new service and a's endpoints.
	h.reg.set(service("a", 80), service("b", 80), service("d", 80))
	h.env.Endpoints.Update("k8s", "a.default.svc.cluster.local", []*model.Endpoint{{Address: "10.9.0.1", Port: 80, ServicePortName: "http"}})
	h.fullPush()
	c.recvType(model.ClusterType)
	c.recvType(model.EndpointType)
}

// A SotW push resends only the types whose content changed for the proxy.
func TestSotWPushSkipsUnchangedTypes(t *testing.T) {
	h := newHarness(t, true)
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{Node: testNode("pod1", nil), TypeUrl: model.ClusterType})
	c.send(ack(c.recvType(model.ClusterType)))
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	c.send(ack(c.recvType(model.EndpointType), clusterA))
	// Only a's endpoints change, in a full push: EDS is sent, CDS is not.
	h.env.Endpoints.Update("k8s", "a.default.svc.cluster.local", []*model.Endpoint{{Address: "10.9.0.2", Port: 80, ServicePortName: "http"}})
	h.fullPush()
	if r := c.recv(); r.GetTypeUrl() != model.EndpointType {
		t.Fatalf("first response after the push is %s, want EDS only", r.GetTypeUrl())
	}
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
