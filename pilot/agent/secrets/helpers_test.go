package secrets_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/secrets"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

// istiodName is the name in the secure port's certificate.
const istiodName = "istiod.istio-system.svc"

func spiffe(ns, sa string) string { return "spiffe://cluster.local/ns/" + ns + "/sa/" + sa }

// startCA runs the control plane in Kubernetes mode against env with the
// secure port on addr ("" for 127.0.0.1:0).
func startCA(t *testing.T, addr string) *bootstrap.Server {
	t.Helper()
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.CA.RootCADir = filepath.Join(t.TempDir(), "none")
	if addr != "" {
		opts.SecureGRPCAddr = addr
	}
	srv := bootstraptest.Start(t, opts)
	if srv.SecureGRPCListenAddr() == "" {
		t.Fatal("secure port not listening")
	}
	return srv
}

// workload is one test workload: its identity and the files the agent reads.
type workload struct {
	ns, sa, identity string
	token            string
	tokenFile        string
	rootFile         string
}

// newWorkload makes service account ns/sa, writes a real istio-ca token for
// it to a token file, and, when srv is not nil, srv's root to a root file.
func newWorkload(t *testing.T, srv *bootstrap.Server, ns, sa string) *workload {
	t.Helper()
	dir := t.TempDir()
	w := &workload{
		ns: ns, sa: sa, identity: spiffe(ns, sa),
		token:     env.ServiceAccountToken(t, ns, sa, "istio-ca"),
		tokenFile: filepath.Join(dir, "istio-token"),
		rootFile:  filepath.Join(dir, "root-cert.pem"),
	}
	writeFile(t, w.tokenFile, []byte(w.token))
	if srv != nil {
		writeFile(t, w.rootFile, srv.Authority().Bundle().RootPEM)
	}
	return w
}

// options returns Manager options for w against srv's secure port (addr
// when srv is nil), logging into logs.
func (w *workload) options(t *testing.T, addr string, logs *bootstraptest.LogBuffer) secrets.Options {
	return secrets.Options{
		CAAddress:      addr,
		CAServerName:   istiodName,
		RootCertFile:   w.rootFile,
		TokenFile:      w.tokenFile,
		Identity:       w.identity,
		InitialBackoff: 50 * time.Millisecond,
		MaxBackoff:     500 * time.Millisecond,
		Log:            bootstraptest.Logger(t, slog.LevelDebug, logs),
	}
}

// run starts m.Run and stops it, waiting for it to return, when the test ends.
func run(t *testing.T, m *secrets.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// get calls m.Get with a 60 s limit.
func get(t *testing.T, m *secrets.Manager, name string) *secrets.Item {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	it, err := m.Get(ctx, name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	return it
}

// next waits up to 60 s for a notification on ch for name.
func next(t *testing.T, ch <-chan string, name string) time.Time {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case n := <-ch:
			if n == name {
				return time.Now()
			}
		case <-timeout:
			t.Fatalf("no %s notification in 60s", name)
		}
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds or 60 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, what, cond)
}

// certs parses every certificate of PEM data.
func certs(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatalf("no certificate in %q", data)
	}
	return out
}

// serial returns the leaf's serial of a workload item.
func serial(t *testing.T, it *secrets.Item) string {
	t.Helper()
	return certs(t, it.CertChainPEM)[0].SerialNumber.String()
}

// openssl runs the real openssl and returns its combined output.
func openssl(t *testing.T, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatal("openssl not found: install it (apt-get install openssl)")
	}
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// countingListener accepts and drops connections, counting them: a CA
// address that must never be called.
type countingListener struct {
	net.Listener
	mu sync.Mutex
	n  int
}

func newCountingListener(t *testing.T) *countingListener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &countingListener{Listener: l}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.mu.Lock()
			c.n++
			c.mu.Unlock()
			conn.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return c
}

func (c *countingListener) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
