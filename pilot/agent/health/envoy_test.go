package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pilot/agent/envoy"
	"github.com/meshpilot/meshpilot/pilot/agent/envoy/envoytest"
)

// fakeEnvoyBinary is the stand-in Envoy built by TestMain.
var fakeEnvoyBinary string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fakeenvoy")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if fakeEnvoyBinary, err = envoytest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// TestWithFakeEnvoy wires the status server as the agent does: readiness from
// Envoy's admin stats and Envoy's Prometheus metrics merged with the agent's.
func TestWithFakeEnvoy(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	config := filepath.Join(dir, "envoy-rev.json")
	if err := envoytest.WriteBootstrap(config, port); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envoytest.EnvRecord, filepath.Join(dir, "record.jsonl"))

	ctx, cancel := context.WithCancel(context.Background())
	envoyDone := make(chan error, 1)
	go func() {
		envoyDone <- envoy.New(envoy.Options{
			Binary: fakeEnvoyBinary, ConfigPath: config, AdminPort: port,
			Stdout: &syncBuffer{}, Stderr: &syncBuffer{},
		}).Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-envoyDone; err != nil {
			t.Errorf("envoy Run: %v", err)
		}
	})

	base := start(t, Options{
		Ready:         func(ctx context.Context) error { return envoy.Ready(ctx, port) },
		EnvoyStatsURL: fmt.Sprintf("http://127.0.0.1:%d/stats/prometheus", port),
		Registry:      agentRegistry(),
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, body := get(t, http.MethodGet, base+ReadyPath)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %d %q", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, _, body := get(t, http.MethodGet, base+StatsPath)
	for _, want := range []string{"istio_agent_test_total 7", `envoy_cluster_upstream_cx_total{cluster_name="xds-grpc"} 3`} {
		if !strings.Contains(body, want) {
			t.Errorf("merged stats lack %q:\n%s", want, body)
		}
	}
}
