package xds

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// inflightMeter watches Delta streams at the gRPC boundary, apart from the
// server's own bookkeeping: the resource bytes of the responses handed to
// gRPC and not yet answered by their nonce (the latest of each type per
// stream, as flow control counts them), and the most ever at once.
type inflightMeter struct {
	mu    sync.Mutex
	now   int64
	peak  int64
	total int64
}

// inflight is one unanswered response.
type inflight struct {
	nonce string
	size  int64
}

func (m *inflightMeter) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &meteredStream{ServerStream: ss, m: m, sent: map[string]inflight{}})
}

func (m *inflightMeter) add(n int64) {
	m.mu.Lock()
	m.now += n
	if n > 0 {
		m.total += n
	}
	m.peak = max(m.peak, m.now)
	m.mu.Unlock()
}

func (m *inflightMeter) figures() (peak, total int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak, m.total
}

// meteredStream is one stream seen by an inflightMeter. SendMsg runs on the
// stream goroutine and RecvMsg on the receiving one: sent has its own lock.
type meteredStream struct {
	grpc.ServerStream
	m    *inflightMeter
	mu   sync.Mutex
	sent map[string]inflight // type URL → latest unanswered response
}

func (s *meteredStream) SendMsg(msg any) error {
	r, ok := msg.(*discovery.DeltaDiscoveryResponse)
	if e, shared := msg.(*encodedDeltaResponse); shared {
		// A response sharing its encoded body (shared_encoding.go):
		// flow control counts it whole, so does the meter.
		r, ok = e.DeltaDiscoveryResponse, true
	}
	if ok {
		var size int64
		for _, res := range r.GetResources() {
			size += int64(len(res.GetResource().GetValue()))
		}
		s.mu.Lock()
		prev := s.sent[r.GetTypeUrl()]
		s.sent[r.GetTypeUrl()] = inflight{nonce: r.GetNonce(), size: size}
		s.mu.Unlock()
		s.m.add(size - prev.size)
	}
	return s.ServerStream.SendMsg(msg)
}

func (s *meteredStream) RecvMsg(msg any) error {
	err := s.ServerStream.RecvMsg(msg)
	if r, ok := msg.(*discovery.DeltaDiscoveryRequest); ok && err == nil && r.GetResponseNonce() != "" {
		s.mu.Lock()
		prev, held := s.sent[r.GetTypeUrl()]
		if held && prev.nonce == r.GetResponseNonce() {
			delete(s.sent, r.GetTypeUrl())
		} else {
			prev.size = 0
		}
		s.mu.Unlock()
		s.m.add(-prev.size)
	}
	return err
}

// paddedLDS serves one listener of about padBytes, the same for every proxy.
type paddedLDS struct{ res model.Resources }

func withPaddedLDS(padBytes int) harnessOpt {
	l := &listenerv3.Listener{Name: "padded", StatPrefix: strings.Repeat("x", padBytes)}
	g := paddedLDS{res: model.Resources{{Name: l.GetName(), Resource: mustAny(l)}}}
	return func(_ *model.Environment, gens *GeneratorTable) { gens.Sidecar[model.ListenerType] = g }
}

func (g paddedLDS) Generate(*model.Proxy, *model.PushContext, *model.WatchedResource, *model.PushRequest) (model.Resources, error) {
	return g.res, nil
}

// stormClients opens n Delta adsc proxies at once over conns gRPC
// connections (CDS, LDS, then EDS, as Envoy asks), waits until every one has
// its full config, and fails if any stream ended on the way.
func stormClients(t *testing.T, h *harness, n, conns int) {
	t.Helper()
	var ccs []*grpc.ClientConn
	for range conns {
		cc, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		ccs = append(ccs, cc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	clients := make([]*adsc.Client, n)
	ended := make(chan error, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range clients {
		clients[i] = adsc.New(adsc.Config{Node: testNode(fmt.Sprintf("storm-%d", i), nil), Delta: true,
			Types: []string{model.ClusterType, model.EndpointType, model.ListenerType}})
		wg.Go(func() {
			<-gate
			if err := clients[i].Run(ctx, ccs[i%conns]); err != nil {
				ended <- fmt.Errorf("proxy %d: %w", i, err)
			}
		})
	}
	close(gate)
	// A guard, not a measure: hundreds of 130 KiB configs under -race on a busy machine.
	wait, stop := context.WithTimeout(ctx, 2*time.Minute)
	defer stop()
	for i, c := range clients {
		if err := c.WaitFor(wait, (*adsc.Client).Complete); err != nil {
			t.Fatalf("proxy %d has no full config: %v (streams ended: %d)", i, err, len(ended))
		}
	}
	select {
	case err := <-ended:
		t.Fatalf("a stream ended during the storm: %v", err)
	default:
	}
}

// Issue 17's connection storm, scaled down: 400 Delta proxies open their
// streams at once, each asking for CDS and LDS together (as Envoy does),
// then EDS, against a server whose in-flight budget holds a handful of
// their responses. Every proxy gets its whole config, no stream is ended,
// and the bytes sent and not yet answered, as seen on the wire, never
// exceed the budget (main pool plus probation pool), though the storm
// sends a hundred times as much.
func TestConnectionStormStaysWithinBudget(t *testing.T) {
	const (
		streams = 400
		conns   = 4
		budget  = 512 << 10
		pad     = 64 << 10
	)
	meter := &inflightMeter{}
	h := newHarnessGRPC(t, true, func(o *Options) {
		o.MaxInflightBytes = budget
		// Every client answers: no reservation may expire and so let
		// bytes out of the budget's count, however slow -race makes them.
		o.ackWait = time.Hour
	}, []grpc.ServerOption{grpc.StreamInterceptor(meter.intercept)}, withPaddedCDS(pad), withPaddedLDS(pad))

	stormClients(t, h, streams, conns)
	if got := value(t, h.metrics.WriteTimeouts); got != 0 {
		t.Errorf("pilot_xds_write_timeout = %v, want 0", got)
	}
	peak, total := meter.figures()
	bound := int64(budget + budget/2)
	t.Logf("in flight: peak %d bytes (bound %d), %d bytes sent in all; reserved peak %d", peak, bound, total, h.s.flow.Peak())
	if total < 50*bound {
		t.Fatalf("the storm sent %d bytes: too few to test a bound of %d", total, bound)
	}
	if peak > bound {
		t.Errorf("%d bytes in flight at the peak, over the bound of %d", peak, bound)
	}
	if got := h.s.flow.Peak(); got > bound {
		t.Errorf("%d bytes reserved at the peak, over the bound of %d", got, bound)
	}
}

// Stuck clients in the storm: 20 streams that ask for CDS and never read
// nor answer connect first and hold what they can of the probation pool;
// their reservations expire (ackWait) and the storm's 200 proxies all get
// their config without any stream being ended, the stuck ones included
// (the send timeout is out of reach).
func TestConnectionStormWithStuckClients(t *testing.T) {
	const stuck = 20
	h := newHarnessWith(t, true, func(o *Options) {
		o.MaxInflightBytes = 512 << 10
		o.ackWait = 200 * time.Millisecond
		o.SendTimeout = time.Hour
	}, withPaddedCDS(64<<10), withPaddedLDS(64<<10))
	h.openStuck(stuck)
	eventually(t, "stuck streams connected", func() bool { return len(h.s.connections()) == stuck })
	stormClients(t, h, 200, 4)
	stuckLeft := 0
	for _, c := range h.s.connections() {
		if strings.HasPrefix(c.proxy.PodName, "stuck-") {
			stuckLeft++
		}
	}
	if stuckLeft != stuck {
		t.Errorf("%d stuck streams left after the storm, want %d (none ended)", stuckLeft, stuck)
	}
	if got := value(t, h.metrics.WriteTimeouts); got != 0 {
		t.Errorf("pilot_xds_write_timeout = %v, want 0", got)
	}
}
