package xds

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshpilot/meshpilot/model"
)

// stuckWindow is the HTTP/2 window of a client that never reads: fixed (no
// BDP growth), so the server's Sends block once about two windows are queued.
const stuckWindow = 64 << 10

// openStuck opens n SotW streams, each on its own connection, that ask for
// every cluster and then never read; it returns their connections.
func (h *harness) openStuck(n int) []*grpc.ClientConn {
	h.t.Helper()
	var conns []*grpc.ClientConn
	for i := range n {
		conn, err := grpc.NewClient(h.addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(stuckWindow), grpc.WithInitialConnWindowSize(stuckWindow))
		if err != nil {
			h.t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		h.t.Cleanup(func() { cancel(); _ = conn.Close() })
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			h.t.Fatal(err)
		}
		if err := stream.Send(&discovery.DiscoveryRequest{Node: testNode(fmt.Sprintf("stuck-%d", i), nil), TypeUrl: model.ClusterType}); err != nil {
			h.t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	return conns
}

// paddedCDS is cdsGen plus fixed resources of padBytes in all, made once,
// so that every CDS response is several flow-control windows long without
// costing a large generation per response.
type paddedCDS struct {
	cdsGen
	pad model.Resources
}

func withPaddedCDS(padBytes int) harnessOpt {
	const each = 4 << 10
	g := paddedCDS{}
	for i := range padBytes / each {
		c := &clusterv3.Cluster{Name: fmt.Sprintf("pad-%d", i), AltStatName: strings.Repeat("x", each)}
		g.pad = append(g.pad, &discovery.Resource{Name: c.GetName(), Resource: mustAny(c)})
	}
	return func(_ *model.Environment, gens *GeneratorTable) { gens.Sidecar[model.ClusterType] = g }
}

func (g paddedCDS) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
	out, err := g.cdsGen.Generate(proxy, push, w, req)
	return append(out, g.pad...), err
}

// Issue 12, item 1: 150 streams that ask and never read once stopped
// pushes to every proxy (each held a push worker in Send, forever). Now a
// stuck stream holds nothing but its own goroutine: with the send timeout
// out of reach (an hour), a healthy proxy still gets every one of six
// changes, while the stuck streams' pending bytes stay counted.
func TestStuckStreamsDelayNoOtherProxy(t *testing.T) {
	const stuck, changes = 150, 6
	h := newHarnessWith(t, true, func(o *Options) {
		o.SendTimeout = time.Hour
		// Room for every stuck stream's first response at once, so they
		// block in Send quickly (flow control's pools: flow_test.go).
		o.MaxInflightBytes = 64 << 20
	}, withPaddedCDS(256<<10))
	svcs := h.reg.Services()
	h.openStuck(stuck)
	eventually(t, "stuck streams connected", func() bool { return len(h.s.connections()) == stuck })
	// One push makes every stuck stream's second response block in Send.
	svcs = append(svcs, service("warmup", 80))
	h.reg.set(svcs...)
	h.fullPush()
	// A guard, not a measure: 150 responses of 256 KiB under -race on a busy machine.
	eventuallyWithin(t, 2*time.Minute, "every stuck stream blocked sending", func() bool {
		blocked := 0
		for _, st := range h.s.SyncStatus() {
			if st.SendingSince != nil && st.UnansweredBytes > stuckWindow {
				blocked++
			}
		}
		return blocked == stuck
	})

	healthy := h.sotw()
	healthy.send(&discovery.DiscoveryRequest{Node: testNode("healthy", nil), TypeUrl: model.ClusterType})
	first := healthy.recvType(model.ClusterType)
	healthy.send(&discovery.DiscoveryRequest{TypeUrl: model.ClusterType, ResponseNonce: first.GetNonce(), VersionInfo: first.GetVersionInfo()})

	for i := range changes {
		name := fmt.Sprintf("change-%d", i)
		svcs = append(svcs, service(name, 80))
		h.reg.set(svcs...)
		start := time.Now()
		h.fullPush()
		for {
			r := healthy.recvType(model.ClusterType)
			healthy.send(&discovery.DiscoveryRequest{TypeUrl: model.ClusterType, ResponseNonce: r.GetNonce(), VersionInfo: r.GetVersionInfo()})
			if hasResource(t, r, clusterName(service(name, 80))) {
				t.Logf("%s reached the healthy proxy in %v", name, time.Since(start))
				break
			}
		}
	}
	if got := value(t, h.metrics.WriteTimeouts); got != 0 {
		t.Errorf("pilot_xds_write_timeout = %v: stuck streams were ended, the test proves nothing", got)
	}
	if got := value(t, h.metrics.UnansweredBytes); got < stuck*stuckWindow {
		t.Errorf("meshpilot_xds_unanswered_bytes = %v, want at least %d for %d stuck streams", got, stuck*stuckWindow, stuck)
	}
}

// A Send blocked longer than SendTimeout ends that stream with
// DeadlineExceeded, counted in pilot_xds_write_timeout, and closes the
// client's connection, so that gRPC lets go of what it queued for it; the
// bytes it held are no longer counted; the server serves the next stream as
// before.
func TestSendTimeoutEndsStuckStream(t *testing.T) {
	h := newHarnessWith(t, true, func(o *Options) { o.SendTimeout = 100 * time.Millisecond }, withPaddedCDS(256<<10))
	svcs := h.reg.Services()
	stuck := h.openStuck(1)[0]
	eventually(t, "stuck stream connected", func() bool { return len(h.s.connections()) == 1 })
	h.reg.set(append(svcs, service("more", 80))...)
	h.fullPush()
	eventually(t, "the stuck stream ended", func() bool { return len(h.s.connections()) == 0 })
	if got := value(t, h.metrics.WriteTimeouts); got != 1 {
		t.Errorf("pilot_xds_write_timeout = %v, want 1", got)
	}
	if got := value(t, h.metrics.UnansweredBytes); got != 0 {
		t.Errorf("meshpilot_xds_unanswered_bytes = %v after the stream ended, want 0", got)
	}
	eventually(t, "the stuck client's connection closed", func() bool { return stuck.GetState() != connectivity.Ready })
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{Node: testNode("after", nil), TypeUrl: model.ClusterType})
	if r := c.recvType(model.ClusterType); !hasResource(t, r, clusterName(service("more", 80))) {
		t.Error("a new stream did not get the current config")
	}
}

// hasResource reports whether r carries a resource named name.
func hasResource(t *testing.T, r *discovery.DiscoveryResponse, name string) bool {
	t.Helper()
	for _, n := range sotwNames(t, r) {
		if n == name {
			return true
		}
	}
	return false
}
