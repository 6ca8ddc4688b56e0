package xdsproxy_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/agent/xdsproxy"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

var allTypes = []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType}

func protocolName(delta bool) string {
	if delta {
		return "delta"
	}
	return "sotw"
}

// TestSameConfigAsDirect: through the proxy a client gets exactly the
// configuration it gets from the control plane directly, SotW and Delta.
func TestSameConfigAsDirect(t *testing.T) {
	opts := bootstraptest.Options(t)
	opts.ConfigDir = bookinfoCopy(t)
	srv := bootstraptest.Start(t, opts)
	p := startProxy(t, xdsproxy.Options{Upstream: srv.GRPCListenAddr()})

	for _, delta := range []bool{false, true} {
		t.Run(protocolName(delta), func(t *testing.T) {
			cfg := productpage(t)
			cfg.Delta = delta
			direct := runClient(t, srv.GRPCListenAddr(), cfg)
			proxied := runClient(t, "unix://"+p.socket, cfg)
			direct.waitClient(t, "direct config", complete)
			proxied.waitClient(t, "config through the proxy", complete)
			for _, typ := range allTypes {
				want, got := direct.Resources(typ), proxied.Resources(typ)
				if len(want) == 0 {
					t.Fatalf("%s: no resources directly", model.ShortType(typ))
				}
				if len(got) != len(want) {
					t.Fatalf("%s: %d resources through the proxy, %d directly", model.ShortType(typ), len(got), len(want))
				}
				for name, w := range want {
					if !proto.Equal(w, got[name]) {
						t.Errorf("%s %s differs through the proxy", model.ShortType(typ), name)
					}
				}
			}
			if !p.Connected() {
				t.Fatal("Connected() is false with a live upstream stream")
			}
		})
	}
}

// serviceEntry is an external service the restart test adds.
const serviceEntry = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: external-api
  namespace: default
spec:
  hosts: [api.example.com]
  ports:
  - number: 443
    name: tls
    protocol: TLS
  resolution: DNS
  location: MESH_EXTERNAL
`

const externalCluster = "outbound|443||api.example.com"

// TestControlPlaneRestart: the control plane stops and a new one starts on
// the same port. The client's stream never ends, it is served by the new
// control plane after the proxy's replay, and a config change made after
// the restart reaches it. The bearer token is read on every connect.
func TestControlPlaneRestart(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(protocolName(delta), func(t *testing.T) {
			dir := bookinfoCopy(t)
			opts := bootstraptest.Options(t)
			opts.ConfigDir = dir
			first := startControlPlane(t, opts)
			// The second control plane must take the first one's xDS port.
			opts.GRPCAddr = first.srv.GRPCListenAddr()

			var tokenReads atomic.Int32
			logs := &bootstraptest.LogBuffer{}
			p := startProxy(t, xdsproxy.Options{
				Upstream: opts.GRPCAddr,
				Token:    func() (string, error) { tokenReads.Add(1); return "token-value", nil },
				Log:      bootstraptest.Logger(t, -4, logs),
			})
			cfg := productpage(t)
			cfg.Delta = delta
			c := runClient(t, "unix://"+p.socket, cfg)
			c.waitClient(t, "config before the restart", complete)
			clusters := len(c.Resources(model.ClusterType))
			before := c.Stats().Responses[model.ClusterType]

			subscribed := subscriptions(first.srv)
			t.Logf("subscriptions before the restart: %v", subscribed)
			first.stop()
			waitFor(t, "the proxy to see the upstream stream fail", func() bool { return !p.Connected() })
			c.running(t)

			second := startControlPlane(t, opts)
			waitFor(t, "the proxy to reconnect", func() bool { return p.Connected() && p.Reconnects() == 1 })
			// The replay rebuilt every subscription the client had.
			waitFor(t, "the client's subscriptions on the new control plane", func() bool {
				return len(second.srv.Discovery().SyncStatus()) == 1 && slices.Equal(subscriptions(second.srv), subscribed)
			})
			if !delta {
				// SotW: the replayed requests are answered in full.
				c.waitClient(t, "config again after the restart", func(c *adsc.Client) bool {
					return c.Stats().Responses[model.ClusterType] > before && complete(c)
				})
			}
			if got := len(c.Resources(model.ClusterType)); got != clusters {
				t.Fatalf("%d clusters after the restart, %d before", got, clusters)
			}

			if err := os.WriteFile(filepath.Join(dir, "external.yaml"), []byte(serviceEntry), 0o600); err != nil {
				t.Fatal(err)
			}
			c.waitClient(t, "the new ServiceEntry's cluster", func(c *adsc.Client) bool {
				_, ok := c.Resources(model.ClusterType)[externalCluster]
				return ok && complete(c)
			})
			c.running(t)
			if n := c.Stats().NACKs; len(n) != 0 {
				t.Fatalf("client NACKed: %v", n)
			}
			if tokenReads.Load() < 2 {
				t.Fatalf("token read %d times over two connects", tokenReads.Load())
			}
			out := logs.String()
			if strings.Count(out, `"msg":"xDS upstream connected"`) != 2 || !strings.Contains(out, `"msg":"xDS upstream disconnected"`) {
				t.Fatalf("want two connect lines and a disconnect line in the log:\n%s", out)
			}
			if strings.Contains(out, "token-value") {
				t.Fatal("the token is in the log")
			}
		})
	}
}

// subscriptions describes what the one proxy connected to srv watches:
// per type, wildcard or not and how many names.
func subscriptions(srv *bootstrap.Server) []string {
	conns := srv.Discovery().SyncStatus()
	if len(conns) != 1 {
		return nil
	}
	var out []string
	for _, typ := range allTypes {
		ts, ok := conns[0].Types[model.ShortType(typ)]
		if !ok {
			out = append(out, model.ShortType(typ)+" not watched")
			continue
		}
		out = append(out, fmt.Sprintf("%s wildcard=%v names=%d", model.ShortType(typ), ts.Wildcard, ts.SubscribedCount))
	}
	return out
}

// TestDownstreamCloseEndsUpstream: when the client goes, so does the
// proxy's stream to the control plane.
func TestDownstreamCloseEndsUpstream(t *testing.T) {
	opts := bootstraptest.Options(t)
	opts.ConfigDir = bookinfoCopy(t)
	srv := bootstraptest.Start(t, opts)
	p := startProxy(t, xdsproxy.Options{Upstream: srv.GRPCListenAddr()})
	for _, delta := range []bool{false, true} {
		cfg := productpage(t)
		cfg.Delta = delta
		c := runClient(t, "unix://"+p.socket, cfg)
		c.waitClient(t, "config", complete)
		if n := len(srv.Discovery().SyncStatus()); n != 1 {
			t.Fatalf("%s: %d upstream connections, want 1", protocolName(delta), n)
		}
		c.close(t)
		waitFor(t, "the upstream stream to close", func() bool { return len(srv.Discovery().SyncStatus()) == 0 })
		waitFor(t, "Connected() to turn false", func() bool { return !p.Connected() })
	}

	// A client that half-closes its stream (CloseSend) gets the end of the
	// stream, and the upstream stream goes too.
	conn := bootstraptest.Dial(t, "unix://"+p.socket)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: productpage(t).Node, TypeUrl: model.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("first response: %v", err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err = stream.Recv(); err != nil {
			break
		}
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v, want io.EOF", err)
	}
	waitFor(t, "the upstream stream to close after CloseSend", func() bool { return len(srv.Discovery().SyncStatus()) == 0 })
}

// TestRunStopsEverything: a stale socket file is replaced; when Run
// returns, the client's stream has ended, the upstream stream is gone, the
// socket is removed, and no goroutine is left behind.
func TestRunStopsEverything(t *testing.T) {
	opts := bootstraptest.Options(t)
	opts.ConfigDir = bookinfoCopy(t)
	srv := bootstraptest.Start(t, opts)
	socket := filepath.Join(t.TempDir(), "XDS")
	if err := os.WriteFile(socket, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	baseline := goroutines()

	p := startProxy(t, xdsproxy.Options{SocketPath: socket, Upstream: srv.GRPCListenAddr()})
	sotw := runClient(t, "unix://"+socket, productpage(t))
	cfg := productpage(t)
	cfg.Delta = true
	delta := runClient(t, "unix://"+socket, cfg)
	sotw.waitClient(t, "SotW config", complete)
	delta.waitClient(t, "Delta config", complete)

	if err := p.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, c := range []*client{sotw, delta} {
		if err := <-c.done; err == nil {
			t.Fatal("the client's stream did not end when the proxy stopped")
		}
		c.done <- nil
		c.close(t)
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	waitFor(t, "the upstream streams to close", func() bool { return len(srv.Discovery().SyncStatus()) == 0 })
	waitGoroutines(t, baseline)
}

// TestClientBeforeControlPlane: a client that connects while the control
// plane is down keeps its stream; its requests, held by the proxy, are
// sent when the control plane comes up, and it gets its whole config.
func TestClientBeforeControlPlane(t *testing.T) {
	addr := testutil.FreeAddr(t) // the control plane's port, free until it starts
	logs := &bootstraptest.LogBuffer{}
	p := startProxy(t, xdsproxy.Options{Upstream: addr, Log: bootstraptest.Logger(t, slog.LevelInfo, logs)})
	var clients []*client
	for _, delta := range []bool{false, true} {
		cfg := productpage(t)
		cfg.Delta = delta
		clients = append(clients, runClient(t, "unix://"+p.socket, cfg))
	}
	waitFor(t, "two failed attempts per client stream", func() bool { return strings.Count(logs.String(), `"attempt":2`) == 2 })
	if p.Connected() {
		t.Fatal("connected with no control plane")
	}
	for _, c := range clients {
		c.running(t)
	}

	opts := bootstraptest.Options(t)
	opts.ConfigDir = bookinfoCopy(t)
	opts.GRPCAddr = addr
	srv := bootstraptest.Start(t, opts)
	for _, c := range clients {
		c.waitClient(t, "config once the control plane is up", complete)
	}
	if n := len(srv.Discovery().SyncStatus()); n != 2 || !p.Connected() {
		t.Fatalf("%d upstream connections (want 2), connected %v", n, p.Connected())
	}
}

// TestRunStopsWhileRetrying: stopping the proxy while its streams wait to
// reconnect ends them and leaves no goroutine behind.
func TestRunStopsWhileRetrying(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	baseline := goroutines()
	logs := &bootstraptest.LogBuffer{}
	p := startProxy(t, xdsproxy.Options{Upstream: addr, Log: bootstraptest.Logger(t, slog.LevelInfo, logs)})
	c := runClient(t, "unix://"+p.socket, productpage(t))
	waitFor(t, "failed attempts", func() bool { return strings.Contains(logs.String(), `"attempt":2`) })
	if err := p.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := <-c.done; err == nil {
		t.Fatal("the client's stream did not end when the proxy stopped")
	}
	c.done <- nil
	c.close(t)
	waitGoroutines(t, baseline)
}

// goroutines counts the running goroutines by stack (pprof's grouping).
func goroutines() map[string]int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	out := map[string]int{}
	for _, g := range strings.Split(b.String(), "\n\n")[1:] {
		head, stack, _ := strings.Cut(g, "\n")
		n, _, _ := strings.Cut(head, " @")
		c, _ := strconv.Atoi(n)
		out[stack] += c
	}
	return out
}

// controlPlaneParts are the control plane's own long-lived goroutines,
// some of which start after Start returns: not the proxy's.
var controlPlaneParts = []string{"meshpilot/pilot/bootstrap.", "meshpilot/pilot/config/", "fsnotify", "runtime/pprof.writeGoroutine"}

// waitGoroutines waits until no stack runs more goroutines than in
// baseline, apart from the control plane's parts, and otherwise fails with
// the stacks that do.
func waitGoroutines(t *testing.T, baseline map[string]int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var extra []string
		for stack, n := range goroutines() {
			if n > baseline[stack] && !slices.ContainsFunc(controlPlaneParts, func(p string) bool { return strings.Contains(stack, p) }) {
				extra = append(extra, fmt.Sprintf("%d more of\n%s", n-baseline[stack], stack))
			}
		}
		if len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left behind:\n%s", strings.Join(extra, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
