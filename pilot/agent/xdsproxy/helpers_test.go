package xdsproxy_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/xdsproxy"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// env is the package's API server, for the test of the secure port.
var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

// testBackoff keeps reconnects quick in tests.
var testBackoff = xdsproxy.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}

// bookinfoCopy copies the Bookinfo example mesh into a fresh directory
// that a test may add files to.
func bookinfoCopy(t *testing.T) string {
	t.Helper()
	src := filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo")
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// controlPlane is a discovery server the test stops and starts itself.
type controlPlane struct {
	srv  *bootstrap.Server
	stop func()
}

// startControlPlane starts a server from opts; stop (also run at cleanup)
// cancels it and waits until every part stopped.
func startControlPlane(t *testing.T, opts bootstrap.Options) *controlPlane {
	t.Helper()
	srv, err := bootstrap.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		cancel()
		srv.Wait()
		t.Fatalf("start the control plane: %v", err)
	}
	var once sync.Once
	cp := &controlPlane{srv: srv, stop: func() { once.Do(func() { cancel(); srv.Wait() }) }}
	t.Cleanup(cp.stop)
	return cp
}

// runningProxy is a proxy whose Run goroutine the test can end and check.
type runningProxy struct {
	*xdsproxy.Proxy
	socket string
	stop   func() error // cancels Run and returns its error
}

// startProxy runs a proxy on a new socket and waits until it listens.
func startProxy(t *testing.T, o xdsproxy.Options) *runningProxy {
	t.Helper()
	if o.SocketPath == "" {
		o.SocketPath = filepath.Join(t.TempDir(), "XDS")
	}
	if o.Backoff == (xdsproxy.Backoff{}) {
		o.Backoff = testBackoff
	}
	if o.Log == nil {
		o.Log = bootstraptest.Logger(t, slog.LevelInfo, nil)
	}
	p := xdsproxy.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-p.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("proxy Run: %v", err)
	}
	var once sync.Once
	var runErr error
	rp := &runningProxy{Proxy: p, socket: o.SocketPath, stop: func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}}
	t.Cleanup(func() {
		if err := rp.stop(); err != nil {
			t.Errorf("proxy Run: %v", err)
		}
	})
	return rp
}

// client is an adsc client running on its own connection.
type client struct {
	*adsc.Client
	done   chan error // Run's result
	cancel context.CancelFunc
	conn   *grpc.ClientConn
}

// runClient starts an ADS client on conn to target (unix:// or host:port)
// and ends it at cleanup, failing the test if Run returned an error.
func runClient(t *testing.T, target string, cfg adsc.Config) *client {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := &client{Client: adsc.New(cfg), done: make(chan error, 1), conn: conn}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { c.done <- c.Run(ctx, conn) }()
	t.Cleanup(func() {
		c.close(t)
	})
	return c
}

// close cancels the client, checks Run ended cleanly, closes its connection.
func (c *client) close(t *testing.T) {
	c.cancel()
	if err := <-c.done; err != nil {
		t.Errorf("ADS client: %v", err)
	}
	c.done <- nil // a second close finds Run's result again
	c.conn.Close()
}

// running fails the test if the client's stream has ended.
func (c *client) running(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		c.done <- err
		t.Fatalf("the client's ADS stream ended: %v", err)
	default:
	}
}

// waitClient waits until cond holds for the client, failing after 30 s.
func (c *client) waitClient(t *testing.T, what string, cond func(*adsc.Client) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.WaitFor(ctx, cond); err != nil {
		t.Fatalf("%s: %v (stats %+v)", what, err, c.Stats())
	}
}

// waitFor polls cond until it holds, failing after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, cond)
}

// productpage is the node of a Bookinfo productpage sidecar.
func productpage(t *testing.T) adsc.Config {
	return adsc.Config{Node: bootstraptest.SidecarNode(t, "productpage-v1", "default", "10.244.0.99", map[string]string{"app": "productpage"})}
}

// complete: every type answered and everything CDS and LDS reference arrived.
func complete(c *adsc.Client) bool { return c.HasAll() && c.Complete() }
