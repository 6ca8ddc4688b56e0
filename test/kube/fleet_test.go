package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// This file holds the parts of TestReplicas: pilot-discovery replicas as
// processes, a TCP balancer standing in for the Service, and a fleet of
// simulated proxies that reconnect as Envoy does.

// buildPilotDiscovery starts building ./cmd/pilot-discovery into a
// temporary directory and returns a channel that yields the binary's path,
// or "" after reporting the failure with t.Errorf.
func buildPilotDiscovery(t *testing.T) <-chan string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pilot-discovery")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/pilot-discovery")
	cmd.Dir = fixtures.RepoRoot(t)
	built := make(chan string, 1)
	go func() {
		defer cancel()
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go build ./cmd/pilot-discovery: %v\n%s", err, b)
			out = ""
		}
		built <- out
	}()
	return built
}

// replica is one pilot-discovery process in Kubernetes mode.
type replica struct {
	name                       string
	grpcAddr, httpAddr, monAdr string
	cmd                        *exec.Cmd
	logs                       *testutil.Buffer
	exited                     chan struct{}
}

// startReplica starts pilot-discovery against env's API server with the
// given max connection age, on free loopback ports; it is stopped (SIGTERM)
// when t ends, and its log tail printed if t failed.
func startReplica(t *testing.T, bin string, env *kubetest.Env, name string, maxAge time.Duration) *replica {
	t.Helper()
	ports, err := testutil.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	r := &replica{name: name, grpcAddr: addr(0), httpAddr: addr(1), monAdr: addr(2), logs: &testutil.Buffer{}, exited: make(chan struct{})}
	dir := t.TempDir()
	r.cmd = exec.Command(bin, "discovery",
		"--kubeconfig", env.Kubeconfig(),
		"--namespace", "istio-system",
		"--grpcAddr", r.grpcAddr, "--httpAddr", r.httpAddr, "--monitoringAddr", r.monAdr,
		// The CA (and its root-cert publisher) on; the webhooks off.
		"--secureGRPCAddr", addr(3), "--httpsAddr=",
		"--keepaliveMaxServerConnectionAge", maxAge.String(),
		"--log_output_level", "default:warn")
	r.cmd.Dir = dir
	// The chart's default: the status-leader writes config status.
	r.cmd.Env = []string{"POD_NAME=" + name, "HOME=" + dir, "PATH=/usr/bin:/bin", "PILOT_ENABLE_STATUS=true"}
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(20 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() {
			t.Logf("%s log tail:\n%s", name, tail(r.logs.String(), 40))
		}
	})
	return r
}

// waitReady polls /ready until it answers 200, failing if the process exits.
func (r *replica) waitReady(t *testing.T) {
	t.Helper()
	waitUntil(t, r.name+" ready", func() error {
		select {
		case <-r.exited:
			t.Fatalf("%s exited before it was ready:\n%s", r.name, tail(r.logs.String(), 40))
		default:
		}
		resp, err := http.Get("http://" + r.httpAddr + "/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/ready: %s", resp.Status)
		}
		return nil
	})
}

// kill ends the process with SIGKILL (no GOAWAY, no lease release) and
// waits until it is gone.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill %s: %v", r.name, err)
	}
	<-r.exited
}

// proxies returns the pod names of the proxies connected to r, from
// Istio's /debug/connections (connection IDs are POD.NAMESPACE-N).
func (r *replica) proxies() (map[string]bool, error) {
	resp, err := http.Get("http://" + r.httpAddr + "/debug/connections")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Clients []struct {
			ConnectionID string `json:"connectionId"`
		} `json:"clients"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("%s /debug/connections: %w", r.name, err)
	}
	pods := map[string]bool{}
	for _, c := range out.Clients {
		if i := strings.LastIndexByte(c.ConnectionID, '-'); i > 0 {
			pods[strings.TrimSuffix(c.ConnectionID[:i], ".default")] = true
		}
	}
	return pods, nil
}

// holds reports whether identity, a Lease holder, is this replica: its
// election identity is its POD_NAME and a random suffix.
func (r *replica) holds(identity string) bool { return strings.HasPrefix(identity, r.name+"-") }

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// balancer is a TCP load balancer in front of the replicas, as a Service's
// kube-proxy rules are: each connection goes to a random backend; one that
// refuses the dial is skipped for another.
type balancer struct {
	lis      net.Listener
	mu       sync.Mutex
	backends []string
	conns    map[net.Conn]bool
	wg       sync.WaitGroup
}

func startBalancer(t *testing.T) *balancer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{lis: lis, conns: map[net.Conn]bool{}}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.close)
	return b
}

func (b *balancer) addr() string { return b.lis.Addr().String() }

func (b *balancer) add(backend string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = append(b.backends, backend)
}

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.lis.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.forward(c)
		}()
	}
}

// forward dials the backends in random order until one answers and copies
// bytes both ways until either side closes, then closes both.
func (b *balancer) forward(c net.Conn) {
	b.mu.Lock()
	order := append([]string(nil), b.backends...)
	b.mu.Unlock()
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var up net.Conn
	for _, addr := range order {
		var err error
		if up, err = net.DialTimeout("tcp", addr, time.Second); err == nil {
			break
		}
	}
	if up == nil || !b.track(c, up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
	b.untrack(c, up)
}

// track records a forwarded pair so close can end it; false once closed.
func (b *balancer) track(cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		return false
	}
	for _, c := range cs {
		b.conns[c] = true
	}
	return true
}

func (b *balancer) untrack(cs ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range cs {
		delete(b.conns, c)
	}
}

func (b *balancer) close() {
	b.lis.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.conns = nil
	b.mu.Unlock()
	b.wg.Wait()
}

// Reconnects back off as Envoy's ADS stream does, jittered and
// exponential: each delay drawn at random below min(base·2^attempt, max),
// reset once a stream has lived. The 5 s cap keeps the test bounded.
const (
	retryBase     = 500 * time.Millisecond
	retryMax      = 5 * time.Second
	streamHealthy = 2 * time.Second
)

func retryDelay(attempt int) time.Duration {
	ceil := retryMax
	if attempt < 10 {
		ceil = min(retryMax, retryBase<<attempt)
	}
	return rand.N(ceil)
}

// fleetProxy is one simulated sidecar: a Delta ADS client (CDS and EDS)
// that opens a new stream after its stream ends, each time with a fresh
// client, as Envoy starts a new ADS stream on a new connection.
type fleetProxy struct {
	pod     string
	cfg     adsc.Config
	current atomic.Pointer[adsc.Client]
	streams atomic.Int64
}

// fleet is many proxies sharing few gRPC connections (as pilot-load's
// --conns): a connection's proxies move together when it is closed.
type fleet struct {
	proxies []*fleetProxy
	conns   []*grpc.ClientConn
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startFleet starts n proxies over conns gRPC connections to addr.
func startFleet(t *testing.T, addr string, n, conns int) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{cancel: cancel}
	for range conns {
		cc, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: 2 * time.Second,
			}))
		if err != nil {
			t.Fatal(err)
		}
		f.conns = append(f.conns, cc)
	}
	for i := range n {
		pod := fmt.Sprintf("proxy-%04d", i)
		p := &fleetProxy{pod: pod, cfg: adsc.Config{
			Node:  bootstraptest.SidecarNode(t, pod, "default", fmt.Sprintf("10.8.%d.%d", i/250, i%250+1), map[string]string{"app": "fleet"}),
			Delta: true,
			Types: []string{model.ClusterType, model.EndpointType},
		}}
		f.proxies = append(f.proxies, p)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			p.run(ctx, f.conns[i%conns])
		}()
	}
	t.Cleanup(f.stop)
	return f
}

func (p *fleetProxy) run(ctx context.Context, conn *grpc.ClientConn) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		c := adsc.New(p.cfg)
		p.current.Store(c)
		p.streams.Add(1)
		start := time.Now()
		_ = c.Run(ctx, conn)
		if time.Since(start) > streamHealthy {
			attempt = 0
		}
		t := time.NewTimer(retryDelay(attempt))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
	for _, c := range f.conns {
		c.Close()
	}
}

// converged reports whether p's current stream holds its complete config
// with every named cluster.
func (p *fleetProxy) converged(clusters ...string) bool {
	c := p.current.Load()
	if c == nil || !c.Complete() {
		return false
	}
	res := c.Resources(model.ClusterType)
	for _, n := range clusters {
		if _, ok := res[n]; !ok {
			return false
		}
	}
	return true
}

// waitConverged polls until every proxy of pods (all when nil) has, at
// some moment since the call, held a current stream with clusters: each
// is latched when seen, since with connections aging out some proxy is
// always between two streams. It returns how long that took from since,
// or an error naming the proxies still missing at the deadline.
func (f *fleet) waitConverged(pods map[string]bool, since time.Time, deadline time.Duration, clusters ...string) (time.Duration, error) {
	pending := map[*fleetProxy]bool{}
	for _, p := range f.proxies {
		if pods == nil || pods[p.pod] {
			pending[p] = true
		}
	}
	end := time.Now().Add(deadline)
	for {
		for p := range pending {
			if p.converged(clusters...) {
				delete(pending, p)
			}
		}
		if len(pending) == 0 {
			return time.Since(since), nil
		}
		if time.Now().After(end) {
			var missing []string
			for p := range pending {
				missing = append(missing, p.pod)
				if len(missing) == 5 {
					break
				}
			}
			return 0, fmt.Errorf("%d proxies not converged on %v after %v, e.g. %v", len(pending), clusters, deadline, missing)
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a wait with a deadline
	}
}

// shares returns how many distinct proxies each replica serves.
func shares(rs ...*replica) ([]int, map[string]bool, error) {
	out := make([]int, len(rs))
	all := map[string]bool{}
	for i, r := range rs {
		pods, err := r.proxies()
		if err != nil {
			return nil, nil, err
		}
		out[i] = len(pods)
		for p := range pods {
			all[p] = true
		}
	}
	return out, all, nil
}
