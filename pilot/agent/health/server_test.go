package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshpilot/meshpilot/internal/testutil"
)

// start runs a status server on a loopback port for the test's lifetime.
func start(t *testing.T, o Options) string {
	t.Helper()
	o.Addr = "127.0.0.1:0"
	s := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	addr := s.Addr()
	if addr == "" {
		t.Fatalf("status server did not bind: %v", <-errc)
	}
	return "http://" + addr
}

func get(t *testing.T, method, url string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(body)
}

func TestReady(t *testing.T) {
	var reason atomic.Pointer[error]
	notReady := errors.New("envoy readiness: workers have not yet started")
	reason.Store(&notReady)
	base := start(t, Options{Ready: func(context.Context) error { return *reason.Load() }})

	code, _, body := get(t, http.MethodGet, base+ReadyPath)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "workers have not yet started") {
		t.Errorf("not ready: %d %q, want 503 with the reason", code, body)
	}
	var ready error
	reason.Store(&ready)
	if code, _, body := get(t, http.MethodGet, base+ReadyPath); code != http.StatusOK {
		t.Errorf("ready: %d %q, want 200", code, body)
	}
}

func TestReadyHasDeadline(t *testing.T) {
	base := start(t, Options{Ready: func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		return nil
	}})
	if code, _, body := get(t, http.MethodGet, base+ReadyPath); code != http.StatusOK {
		t.Errorf("ready: %d %q", code, body)
	}
}

func agentRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "istio_agent_test_total", Help: "test counter"})
	c.Add(7)
	reg.MustRegister(c)
	return reg
}

func TestStatsMerged(t *testing.T) {
	envoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# TYPE envoy_server_live gauge\nenvoy_server_live{} 1\n")
	}))
	defer envoy.Close()
	base := start(t, Options{Registry: agentRegistry(), EnvoyStatsURL: envoy.URL + "/stats/prometheus"})

	code, hdr, body := get(t, http.MethodGet, base+StatsPath)
	if code != http.StatusOK {
		t.Fatalf("stats: %d %q", code, body)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	agent := strings.Index(body, "istio_agent_test_total 7")
	env := strings.Index(body, "envoy_server_live{} 1")
	if agent < 0 || env < 0 || agent > env {
		t.Errorf("stats should hold the agent's metrics then Envoy's:\n%s", body)
	}
}

func TestStatsEnvoyDown(t *testing.T) {
	envoy := httptest.NewServer(http.NotFoundHandler())
	envoy.Close() // nothing listens there now
	var logs testutil.Buffer
	base := start(t, Options{
		Registry:      agentRegistry(),
		EnvoyStatsURL: envoy.URL + "/stats/prometheus",
		Log:           slog.New(slog.NewTextHandler(&logs, nil)),
	})
	for range 3 {
		code, _, body := get(t, http.MethodGet, base+StatsPath)
		if code != http.StatusOK || !strings.Contains(body, "istio_agent_test_total 7") {
			t.Fatalf("stats with Envoy down: %d %q, want 200 with the agent's metrics", code, body)
		}
	}
	if n := strings.Count(logs.String(), "fetch envoy metrics failed"); n != 1 {
		t.Errorf("logged the Envoy failure %d times, want once:\n%s", n, logs.String())
	}
}

func TestQuit(t *testing.T) {
	quit := make(chan struct{}, 1)
	base := start(t, Options{Quit: func() { quit <- struct{}{} }})

	if code, _, _ := get(t, http.MethodGet, base+QuitPath); code != http.StatusMethodNotAllowed {
		t.Errorf("GET quitquitquit: %d, want 405", code)
	}
	select {
	case <-quit:
		t.Fatal("GET called Quit")
	default:
	}
	if code, _, _ := get(t, http.MethodPost, base+QuitPath); code != http.StatusOK {
		t.Errorf("POST quitquitquit: %d, want 200", code)
	}
	select {
	case <-quit:
	default:
		t.Fatal("POST quitquitquit did not call Quit")
	}
}

func TestListenError(t *testing.T) {
	s := New(Options{Addr: "256.0.0.1:0"})
	if err := s.Run(context.Background()); err == nil {
		t.Fatal("Run on a bad address = nil")
	}
	if s.Addr() != "" {
		t.Errorf("Addr after failed bind = %q", s.Addr())
	}
}
