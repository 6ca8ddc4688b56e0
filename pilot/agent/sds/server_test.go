package sds_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/sds"
	"github.com/meshpilot/meshpilot/pilot/agent/sds/sdstest"
)

var node = &corev3.Node{Id: "sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local"}

// modes runs f for SotW and Delta.
func modes(t *testing.T, f func(t *testing.T, delta bool)) {
	t.Run("sotw", func(t *testing.T) { f(t, false) })
	t.Run("delta", func(t *testing.T) { f(t, true) })
}

func hasBoth(c *sdstest.Client) bool {
	return c.Latest("default") != nil && c.Latest("ROOTCA") != nil
}

// checkWorkload asserts the secret is a valid "default" holding it.
func checkWorkload(t *testing.T, s *tlsv3.Secret, it *sds.Item) {
	t.Helper()
	if err := s.ValidateAll(); err != nil {
		t.Fatalf("default secret does not validate: %v", err)
	}
	tc := s.GetTlsCertificate()
	if s.GetName() != "default" || tc == nil {
		t.Fatalf("default secret = %v, want a tls_certificate named default", s)
	}
	if !bytes.Equal(tc.GetCertificateChain().GetInlineBytes(), it.CertChainPEM) ||
		!bytes.Equal(tc.GetPrivateKey().GetInlineBytes(), it.PrivateKeyPEM) {
		t.Fatal("default secret does not carry the provider's chain and key")
	}
}

// checkRoot asserts the secret is a valid "ROOTCA" holding it.
func checkRoot(t *testing.T, s *tlsv3.Secret, it *sds.Item) {
	t.Helper()
	if err := s.ValidateAll(); err != nil {
		t.Fatalf("ROOTCA secret does not validate: %v", err)
	}
	vc := s.GetValidationContext()
	if s.GetName() != "ROOTCA" || vc == nil {
		t.Fatalf("ROOTCA secret = %v, want a validation_context named ROOTCA", s)
	}
	if !bytes.Equal(vc.GetTrustedCa().GetInlineBytes(), it.RootPEM) {
		t.Fatal("ROOTCA secret does not carry the provider's root")
	}
}

func TestInitialSecrets(t *testing.T) {
	modes(t, func(t *testing.T, delta bool) {
		p := newFakeProvider()
		w, r := p.setBoth(t, "one")
		srv := startServer(t, p, socketPath(t))
		c := sdstest.Dial(t, srv.path, delta, node, "default", "ROOTCA")
		if err := c.WaitFor(waitCtx(t), hasBoth); err != nil {
			t.Fatal(err)
		}
		checkWorkload(t, c.Latest("default"), w)
		checkRoot(t, c.Latest("ROOTCA"), r)
		if c.Nacks() != 0 || c.Err() != nil {
			t.Fatalf("nacks=%d err=%v, want none", c.Nacks(), c.Err())
		}
		if logs := srv.logs.String(); strings.Contains(logs, "PRIVATE KEY") || strings.Contains(logs, string(w.PrivateKeyPEM)) {
			t.Fatal("logs contain key material")
		}
	})
}

func TestFirstRequestWaitsForCertificate(t *testing.T) {
	modes(t, func(t *testing.T, delta bool) {
		p := newFakeProvider()
		srv := startServer(t, p, socketPath(t))
		c := sdstest.Dial(t, srv.path, delta, node, "default", "ROOTCA")
		w, r := p.setBoth(t, "late")
		if err := c.WaitFor(waitCtx(t), hasBoth); err != nil {
			t.Fatal(err)
		}
		checkWorkload(t, c.Latest("default"), w)
		checkRoot(t, c.Latest("ROOTCA"), r)
	})
}

func TestRotationPushed(t *testing.T) {
	modes(t, func(t *testing.T, delta bool) {
		p := newFakeProvider()
		p.setBoth(t, "one")
		srv := startServer(t, p, socketPath(t))
		c := sdstest.Dial(t, srv.path, delta, node, "default", "ROOTCA")
		ctx := waitCtx(t)
		if err := c.WaitFor(ctx, hasBoth); err != nil {
			t.Fatal(err)
		}
		chain, key := testutil.SelfSignedCert(t, "two")
		rotated := &sds.Item{Name: "default", CertChainPEM: chain, PrivateKeyPEM: key}
		p.Set(rotated)
		if err := c.WaitFor(ctx, func(c *sdstest.Client) bool { return c.Updates("default") == 2 }); err != nil {
			t.Fatal(err)
		}
		checkWorkload(t, c.Latest("default"), rotated)
		if n := c.Updates("ROOTCA"); n != 1 {
			t.Fatalf("ROOTCA versions = %d, want 1 (unchanged)", n)
		}

		// A change notification without new content sends nothing new; a
		// later root change still arrives.
		p.Set(rotated)
		rootPEM, _ := testutil.SelfSignedCert(t, "root-two")
		root := &sds.Item{Name: "ROOTCA", RootPEM: rootPEM}
		p.Set(root)
		if err := c.WaitFor(ctx, func(c *sdstest.Client) bool { return c.Updates("ROOTCA") == 2 }); err != nil {
			t.Fatal(err)
		}
		checkRoot(t, c.Latest("ROOTCA"), root)
		if n := c.Updates("default"); n != 2 {
			t.Fatalf("default versions = %d, want 2", n)
		}
		if c.Nacks() != 0 {
			t.Fatalf("client NACKed %d responses", c.Nacks())
		}
	})
}

func TestUnknownNameRefused(t *testing.T) {
	modes(t, func(t *testing.T, delta bool) {
		p := newFakeProvider()
		p.setBoth(t, "one")
		srv := startServer(t, p, socketPath(t))
		c := sdstest.Dial(t, srv.path, delta, node, "default", "file-cert:/etc/certs/cert.pem")
		if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool { return c.Err() != nil }); err != nil {
			t.Fatal(err)
		}
		st := status.Convert(c.Err())
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `"file-cert:/etc/certs/cert.pem"`) {
			t.Fatalf("stream error = %v, want InvalidArgument naming the resource", c.Err())
		}
	})
}

func TestEveryStreamGetsPushes(t *testing.T) {
	p := newFakeProvider()
	p.setBoth(t, "one")
	srv := startServer(t, p, socketPath(t))
	ctx := waitCtx(t)
	clients := []*sdstest.Client{
		sdstest.Dial(t, srv.path, false, node, "default", "ROOTCA"),
		sdstest.Dial(t, srv.path, true, node, "default", "ROOTCA"),
		sdstest.Dial(t, srv.path, false, node, "default"),
	}
	for _, c := range clients {
		if err := c.WaitFor(ctx, func(c *sdstest.Client) bool { return c.Latest("default") != nil }); err != nil {
			t.Fatal(err)
		}
	}
	chain, key := testutil.SelfSignedCert(t, "two")
	rotated := &sds.Item{Name: "default", CertChainPEM: chain, PrivateKeyPEM: key}
	p.Set(rotated)
	for i, c := range clients {
		if err := c.WaitFor(ctx, func(c *sdstest.Client) bool { return c.Updates("default") == 2 }); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		checkWorkload(t, c.Latest("default"), rotated)
	}
	if clients[2].Latest("ROOTCA") != nil {
		t.Fatal("a stream that did not ask for ROOTCA received it")
	}
}

func TestClosedStreamLeavesNoGoroutine(t *testing.T) {
	modes(t, func(t *testing.T, delta bool) {
		p := newFakeProvider()
		p.setBoth(t, "one")
		srv := startServer(t, p, socketPath(t))
		ctx := waitCtx(t)
		open := func() {
			c := sdstest.Dial(t, srv.path, delta, node, "default", "ROOTCA")
			if err := c.WaitFor(ctx, hasBoth); err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
		open() // warm up whatever gRPC starts once per process
		base := waitGoroutines(t, -1)
		for range 5 {
			open()
		}
		waitGoroutines(t, base)
	})
}

// waitGoroutines polls until at most limit goroutines run (limit < 0: until
// the count stops falling for a moment) and returns the count.
func waitGoroutines(t *testing.T, limit int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	prev, stable := runtime.NumGoroutine(), 0
	for time.Now().Before(deadline) {
		runtime.Gosched()
		n := runtime.NumGoroutine()
		if limit >= 0 && n <= limit {
			return n
		}
		if limit < 0 {
			if n >= prev {
				stable++
			} else {
				stable = 0
			}
			if stable >= 50 {
				return n
			}
		}
		prev = n
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
	if limit >= 0 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines still running, want at most %d:\n%s", runtime.NumGoroutine(), limit, buf[:runtime.Stack(buf, true)])
	}
	return prev
}

func TestRunCancelRemovesSocket(t *testing.T) {
	p := newFakeProvider()
	p.setBoth(t, "one")
	path := socketPath(t)
	srv := startServer(t, p, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket mode = %v, want a socket with 0666 (as Istio)", fi.Mode())
	}
	dir, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if dir.Mode().Perm() != 0o750 {
		t.Fatalf("socket directory mode = %v, want 0750 (as Istio)", dir.Mode().Perm())
	}
	c := sdstest.Dial(t, path, false, node, "default")
	if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool { return c.Latest("default") != nil }); err != nil {
		t.Fatal(err)
	}
	srv.stop(t)
	if _, err := os.Stat(path); !isNotExist(err) {
		t.Fatalf("socket after Run returned: stat err = %v, want not exist", err)
	}
	if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool { return c.Err() != nil }); err != nil {
		t.Fatalf("open stream did not end when the server stopped: %v", err)
	}
}

func TestRunCancelWhileWaitingForCertificate(t *testing.T) {
	p := newFakeProvider() // never gets a certificate
	srv := startServer(t, p, socketPath(t))
	c := sdstest.Dial(t, srv.path, true, node, "default")
	select {
	case <-p.blocked:
	case <-waitCtx(t).Done():
		t.Fatal("the stream never asked the provider for the certificate")
	}
	srv.stop(t) // fails the test if Run does not return
	if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool { return c.Err() != nil }); err != nil {
		t.Fatalf("waiting stream did not end when the server stopped: %v", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	path := socketPath(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}

	p := newFakeProvider()
	w, _ := p.setBoth(t, "one")
	srv := startServer(t, p, path)
	c := sdstest.Dial(t, srv.path, false, node, "default")
	if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool { return c.Latest("default") != nil }); err != nil {
		t.Fatal(err)
	}
	checkWorkload(t, c.Latest("default"), w)
}

func TestOptionsRequired(t *testing.T) {
	ctx := context.Background()
	if err := sds.New(sds.Options{Provider: newFakeProvider()}).Run(ctx); err == nil || !strings.Contains(err.Error(), "SocketPath") {
		t.Fatalf("Run without SocketPath = %v, want an error naming SocketPath", err)
	}
	if err := sds.New(sds.Options{SocketPath: socketPath(t)}).Run(ctx); err == nil || !strings.Contains(err.Error(), "Provider") {
		t.Fatalf("Run without Provider = %v, want an error naming Provider", err)
	}
}
