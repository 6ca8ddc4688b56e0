package sds_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/sds"
)

// fakeProvider holds secrets in memory; Get blocks until the name is set.
type fakeProvider struct {
	changes chan string

	mu    sync.Mutex
	items map[string]*sds.Item
	set   chan struct{} // closed and replaced on every Set

	blockedOnce sync.Once
	blocked     chan struct{} // closed when a Get first waits
}

func newFakeProvider() *fakeProvider {
	return &fakeProvider{changes: make(chan string, 64), items: map[string]*sds.Item{},
		set: make(chan struct{}), blocked: make(chan struct{})}
}

func (p *fakeProvider) Get(ctx context.Context, name string) (*sds.Item, error) {
	for {
		p.mu.Lock()
		it, ch := p.items[name], p.set
		p.mu.Unlock()
		if it != nil {
			return it, nil
		}
		p.blockedOnce.Do(func() { close(p.blocked) })
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (p *fakeProvider) Subscribe() <-chan string { return p.changes }

// Set stores an item and announces the change.
func (p *fakeProvider) Set(it *sds.Item) {
	p.mu.Lock()
	p.items[it.Name] = it
	close(p.set)
	p.set = make(chan struct{})
	p.mu.Unlock()
	p.changes <- it.Name
}

// setBoth sets a fresh workload certificate and root; it returns them.
func (p *fakeProvider) setBoth(t *testing.T, cn string) (workload, root *sds.Item) {
	t.Helper()
	chain, key := testutil.SelfSignedCert(t, cn)
	rootPEM, _ := testutil.SelfSignedCert(t, "root-"+cn)
	workload = &sds.Item{Name: "default", CertChainPEM: chain, PrivateKeyPEM: key, RootPEM: rootPEM}
	root = &sds.Item{Name: "ROOTCA", RootPEM: rootPEM}
	p.Set(workload)
	p.Set(root)
	return workload, root
}

// running is a Server started by startServer.
type running struct {
	srv    *sds.Server
	path   string
	logs   *testutil.Buffer
	cancel context.CancelFunc
	done   chan error
}

// socketPath returns a short path (Unix socket paths are limited to ~108
// bytes, t.TempDir can be longer) in a directory that does not exist yet.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "workload-spiffe-uds", "socket")
}

// startServer runs a Server on path with p until the test ends.
func startServer(t *testing.T, p sds.Provider, path string) *running {
	t.Helper()
	return startWith(t, sds.Options{SocketPath: path, Provider: p})
}

// startWith runs a Server with o (its Log set to the returned logs) until
// the test ends.
func startWith(t *testing.T, o sds.Options) *running {
	t.Helper()
	logs := &testutil.Buffer{}
	o.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	path := o.SocketPath
	srv := sds.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, path: path, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	select {
	case <-srv.Ready():
	case err := <-r.done:
		r.done <- err
		t.Fatalf("sds server did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("sds server not ready after 30s")
	}
	return r
}

// stop cancels Run and waits for it, failing the test on an error.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(30 * time.Second):
		t.Error("Run did not return 30s after cancel")
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
