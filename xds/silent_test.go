package xds

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/monitoring"
)

// honestAddr is the loopback address honest clients connect from, so that
// the server sees them as another host than the silent streams (127.0.0.1).
const honestAddr = "127.0.0.2"

// dialFrom connects to addr from the local IP from.
func dialFrom(tb testing.TB, addr, from string) *grpc.ClientConn {
	tb.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

// waitingForBudget counts the connections whose response waits for
// flow-control budget or Send.
func waitingForBudget(s *DiscoveryServer) int {
	n := 0
	for _, c := range s.connections() {
		if c.sendingSince.Load() != 0 {
			n++
		}
	}
	return n
}

// Issue 32, item 8: streams that ask and never read each held the whole
// probation pool for ackWait, and new streams queued behind all of them:
// with a first response larger than the pool, an honest proxy's first
// config came after (silent streams × ackWait). Now waiters are served a
// peer (host) at a time, least recently served first, and a silent host's
// reservations expire sooner while another host waits: the honest proxy,
// on another host, gets its whole first config within ackWait however many
// silent streams queue ahead of it.
func TestFirstConfigNotDelayedBySilentStreams(t *testing.T) {
	silent := 150
	if testing.Short() {
		silent = 40
	}
	const (
		wait = 3 * time.Second
		pad  = 256 << 10
	)
	h := newHarnessWith(t, true, func(o *Options) {
		o.SendTimeout = time.Hour
		// Probation pool of 128 KiB: one silent stream's first response fills it.
		o.MaxInflightBytes = pad
		o.ackWait = wait
	}, withPaddedCDS(pad))
	h.openStuck(silent)
	// One silent stream holds the pool, the others wait for it (one a
	// turn, each ackWait: a busy machine may have served a few by now).
	eventuallyWithin(t, time.Minute, "silent streams connected and waiting", func() bool {
		return len(h.s.connections()) == silent && waitingForBudget(h.s) >= silent*3/4
	})

	stream, err := discovery.NewAggregatedDiscoveryServiceClient(dialFrom(t, h.addr, honestAddr)).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := stream.Send(&discovery.DiscoveryRequest{Node: testNode("honest", nil), TypeUrl: model.ClusterType}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *discovery.DiscoveryResponse, 1)
	ended := make(chan error, 1)
	go func() {
		r, err := stream.Recv()
		if err != nil {
			ended <- err
			return
		}
		got <- r
	}()
	select {
	case err := <-ended:
		t.Fatalf("honest stream ended: %v", err)
	case r := <-got:
		if !hasResource(t, r, clusterName(service("a", 80))) || len(r.GetResources()) < pad/(4<<10) {
			t.Fatalf("first response has %d resources, not the whole config", len(r.GetResources()))
		}
		t.Logf("first config %v after asking, behind %d silent streams", time.Since(start), silent)
	case <-time.After(wait):
		t.Fatalf("no first config %v after asking, behind %d silent streams (ackWait %v)", time.Since(start), silent, wait)
	}
}

// BenchmarkFirstConfigBehindSilent measures, with the default budget and
// ackWait, how long an honest proxy (on another host) waits for its first
// config while 16 silent streams, each sent a 3 MiB first response, wait
// for budget; then how long a push takes to reach it (it answers). Each op
// starts a fresh server; the reported figures are medians over the ops:
//
//	go test ./xds/ -run '^$' -bench FirstConfigBehindSilent -benchtime 3x
func BenchmarkFirstConfigBehindSilent(b *testing.B) {
	const silent, pad = 16, 3 << 20
	var first, push []float64
	for range b.N {
		f, p := firstConfigBehindSilent(b, silent, pad)
		first, push = append(first, f.Seconds()*1000), append(push, p.Seconds()*1000)
	}
	slices.Sort(first)
	slices.Sort(push)
	b.ReportMetric(first[len(first)/2], "first-config-ms")
	b.ReportMetric(push[len(push)/2], "push-ms")
	b.ReportMetric(0, "ns/op")
}

// firstConfigBehindSilent runs one op of BenchmarkFirstConfigBehindSilent.
func firstConfigBehindSilent(b *testing.B, silent, pad int) (first, push time.Duration) {
	b.StopTimer()
	defer b.StartTimer()
	reg := &fakeRegistry{}
	reg.set(service("a", 80), service("b", 80))
	env := &model.Environment{ServiceDiscovery: reg, ConfigStore: fakeStore{}, Endpoints: model.NewEndpointIndex(), DomainSuffix: "cluster.local"}
	gens := GeneratorTable{Sidecar: map[string]model.Generator{model.ClusterType: cdsGen{}}}
	withPaddedCDS(pad)(env, &gens)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	o := DefaultOptions()
	o.Log, o.Metrics, o.SendTimeout = log, monitoring.New(prometheus.NewRegistry()), time.Hour
	o.DebounceAfter, o.DebounceMax = time.Millisecond, 50*time.Millisecond
	s := NewDiscoveryServer(env, gens, o)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer(grpc.ForceServerCodecV2(NewCodec()))
	s.Register(g)
	go func() { _ = g.Serve(s.Listener(lis)) }()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = s.Run(ctx) }()
	s.MarkReady()
	defer func() { cancel(); <-ran; g.Stop() }()

	for i := range silent {
		conn := dialFrom(b, lis.Addr().String(), "127.0.0.1")
		st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Send(&discovery.DiscoveryRequest{Node: testNode(fmt.Sprintf("silent-%d", i), nil), TypeUrl: model.ClusterType}); err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); len(s.connections()) < silent || waitingForBudget(s) == 0; {
		if time.Now().After(deadline) {
			b.Fatal("silent streams not waiting for budget")
		}
		time.Sleep(5 * time.Millisecond)
	}

	stream, err := discovery.NewAggregatedDiscoveryServiceClient(dialFrom(b, lis.Addr().String(), honestAddr)).StreamAggregatedResources(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	if err := stream.Send(&discovery.DiscoveryRequest{Node: testNode("honest", nil), TypeUrl: model.ClusterType}); err != nil {
		b.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		b.Fatal(err)
	}
	first = time.Since(start)
	if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: model.ClusterType, ResponseNonce: r.GetNonce(), VersionInfo: r.GetVersionInfo()}); err != nil {
		b.Fatal(err)
	}
	reg.set(service("a", 80), service("b", 80), service("c", 80))
	start = time.Now()
	s.ConfigUpdate(model.NewPushRequest(true, model.ReasonServiceUpdate))
	for want := len(r.GetResources()) + 1; ; {
		r, err := stream.Recv()
		if err != nil {
			b.Fatal(err)
		}
		if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: model.ClusterType, ResponseNonce: r.GetNonce(), VersionInfo: r.GetVersionInfo()}); err != nil {
			b.Fatal(err)
		}
		if len(r.GetResources()) >= want {
			break
		}
	}
	push = time.Since(start)
	b.StopTimer()
	return first, push
}
