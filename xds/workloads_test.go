package xds

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/model"
)

// recordingHooks records the calls of the transport.
type recordingHooks struct {
	refuse error
	mu     sync.Mutex
	events []string
	at     map[string]time.Time
}

func (r *recordingHooks) record(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recordingHooks) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *recordingHooks) OnConnect(_ context.Context, p *model.Proxy, at time.Time) error {
	r.mu.Lock()
	if r.refuse != nil {
		r.mu.Unlock()
		return r.refuse
	}
	r.at[p.PodName] = at
	r.mu.Unlock()
	r.record("connect " + p.PodName)
	return nil
}

func (r *recordingHooks) OnDisconnect(p *model.Proxy, at time.Time) {
	r.mu.Lock()
	same := r.at[p.PodName].Equal(at)
	r.mu.Unlock()
	if same {
		r.record("disconnect " + p.PodName)
	}
}

func (r *recordingHooks) OnHealth(p *model.Proxy, healthy bool, message string) {
	if healthy {
		r.record("healthy " + p.PodName)
	} else {
		r.record("unhealthy " + p.PodName + ": " + message)
	}
}

// TestWorkloadHooks: health reports (SotW and Delta) reach the hooks and
// get no response; a disconnect is told with the connect's time; an
// OnConnect error ends only that stream, with its status or FailedPrecondition.
func TestWorkloadHooks(t *testing.T) {
	hooks := &recordingHooks{at: map[string]time.Time{}}
	h := newHarnessWith(t, true, func(o *Options) { o.Workloads = hooks })

	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{Node: testNode("vm-1", nil), TypeUrl: HealthInfoType})
	c.send(&discovery.DiscoveryRequest{TypeUrl: HealthInfoType, ErrorDetail: &status.Status{Message: "probe failed"}})
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.ClusterType})
	c.recvType(model.ClusterType) // health reports got no response before it

	d := h.delta()
	d.send(&discovery.DeltaDiscoveryRequest{Node: testNode("vm-2", nil), TypeUrl: HealthInfoType})
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: model.ClusterType})
	d.recv(model.ClusterType)

	c.cancel()
	eventually(t, "vm-1's disconnect", func() bool {
		ev := hooks.seen()
		return len(ev) > 0 && ev[len(ev)-1] == "disconnect vm-1"
	})
	want := []string{"connect vm-1", "healthy vm-1", "unhealthy vm-1: probe failed", "connect vm-2", "healthy vm-2", "disconnect vm-1"}
	if got := hooks.seen(); len(got) != len(want) {
		t.Fatalf("hooks saw %q, want %q", got, want)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("hooks saw %q, want %q", got, want)
			}
		}
	}

	hooks.mu.Lock()
	hooks.refuse = grpcstatus.Error(codes.PermissionDenied, "not yours")
	hooks.mu.Unlock()
	r := h.sotw()
	r.send(&discovery.DiscoveryRequest{Node: testNode("vm-3", nil), TypeUrl: model.ClusterType})
	if err := r.streamErr(); grpcstatus.Code(err) != codes.PermissionDenied {
		t.Fatalf("refused stream: %v", err)
	}
	hooks.mu.Lock()
	hooks.refuse = errors.New("no WorkloadGroup")
	hooks.mu.Unlock()
	r = h.sotw()
	r.send(&discovery.DiscoveryRequest{Node: testNode("vm-4", nil), TypeUrl: model.ClusterType})
	if err := r.streamErr(); grpcstatus.Code(err) != codes.FailedPrecondition {
		t.Fatalf("refused stream (plain error): %v", err)
	}
	for _, e := range hooks.seen() {
		if e == "disconnect vm-3" || e == "disconnect vm-4" {
			t.Fatalf("a refused proxy was disconnected: %q", hooks.seen())
		}
	}
	h.reg.set(service("a", 80), service("b", 80), service("c", 80))
	h.fullPush()
	d.recv(model.ClusterType) // the other streams go on
}
