package bootstrap

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"k8s.io/client-go/rest"
)

// TestNotReadyUntilCachesSync: with the API server unreachable, the server
// serves /ready as 503 and keeps waiting (no crash); cancelling ends Start
// with the context's error.
func TestNotReadyUntilCachesSync(t *testing.T) {
	opts := DefaultOptions()
	opts.KubeRestConfig = &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	opts.MeshConfigFile = ""
	opts.GRPCAddr, opts.MonitoringAddr, opts.SecureGRPCAddr, opts.HTTPSAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	opts.HTTPAddr = testutil.FreeAddr(t)
	opts.Log = slog.New(slog.DiscardHandler)
	srv, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- srv.Start(ctx) }()

	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + opts.HTTPAddr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("/ready = %d while the API server is unreachable, want 503", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/ready never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-started:
		t.Fatalf("Start returned %v without an API server", err)
	default:
	}
	cancel()
	if err := <-started; !errors.Is(err, context.Canceled) {
		t.Fatalf("Start after cancel = %v, want context.Canceled", err)
	}
	srv.Wait()
}
