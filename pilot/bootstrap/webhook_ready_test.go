package bootstrap

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pilot/ca"
	webhook "github.com/meshpilot/meshpilot/pilot/webhook/server"
)

// TestReadyWaitsForWebhook: with the config loaded, /ready stays 503 while
// the webhook does not serve (istiod answers ready here, istio/istio#61049),
// and turns 200 once the webhook completed a verified handshake with itself.
func TestReadyWaitsForWebhook(t *testing.T) {
	opts := DefaultOptions()
	opts.ConfigDir = t.TempDir()
	opts.MeshConfigFile = ""
	opts.Log = slog.New(slog.DiscardHandler)
	s, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if s.webhook == nil {
		t.Fatal("no webhook with the default --httpsAddr")
	}
	s.discovery.MarkReady()
	ready := func() (int, string) {
		rec := httptest.NewRecorder()
		s.httpMux().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ready", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "admission webhook not serving") {
		t.Fatalf("/ready before the webhook exists = %d %q, want 503 naming the webhook", code, body)
	}

	bundle, err := ca.NewSelfSigned(ca.SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.NewAuthority(bundle, ca.DefaultPolicy()).IssueServing([]string{"istiod.istio-system.svc"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.webhook.server = webhook.New(webhook.Options{
		TLS:        &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12},
		ProbeRoots: bundle.RootPool(), ProbeServerName: "istiod.istio-system.svc",
	})
	if code, _ := ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("/ready with the webhook built but not listening = %d, want 503", code)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.webhook.server.Serve(ctx, lis) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	wait, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := s.webhook.server.WaitServing(wait); err != nil {
		t.Fatal(err)
	}
	if code, body := ready(); code != http.StatusOK {
		t.Fatalf("/ready with the webhook serving = %d %q, want 200", code, body)
	}
}

// TestWebhookNeedsCA: the webhook's certificate comes from the CA, so
// --httpsAddr with the CA off is refused, naming both flags.
func TestWebhookNeedsCA(t *testing.T) {
	opts := DefaultOptions()
	opts.ConfigDir = t.TempDir()
	opts.SecureGRPCAddr = ""
	if _, err := NewServer(opts); err == nil || !strings.Contains(err.Error(), "--httpsAddr") || !strings.Contains(err.Error(), "--secureGRPCAddr") {
		t.Fatalf("NewServer = %v, want an error naming --httpsAddr and --secureGRPCAddr", err)
	}
	opts.HTTPSAddr = ""
	if _, err := NewServer(opts); err != nil {
		t.Fatalf("both off: %v", err)
	}
}
