package health

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/envoy"
	"github.com/meshpilot/meshpilot/pilot/agent/envoy/envoytest"
)

// fakeEnvoyBinary is the stand-in Envoy built by TestMain.
var fakeEnvoyBinary string

func TestMain(m *testing.M) { os.Exit(envoytest.RunMain(m, &fakeEnvoyBinary)) }

// TestWithFakeEnvoy wires the status server as the agent does: readiness from
// Envoy's admin stats and Envoy's Prometheus metrics merged with the agent's.
func TestWithFakeEnvoy(t *testing.T) {
	fe := envoytest.NewFake(t)

	ctx, cancel := context.WithCancel(context.Background())
	envoyDone := make(chan error, 1)
	go func() {
		envoyDone <- envoy.New(envoy.Options{
			Binary: fakeEnvoyBinary, ConfigPath: fe.Config, AdminPort: fe.AdminPort,
			Stdout: &testutil.Buffer{}, Stderr: &testutil.Buffer{},
		}).Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-envoyDone; err != nil {
			t.Errorf("envoy Run: %v", err)
		}
	})

	base := start(t, Options{
		Ready:         func(ctx context.Context) error { return envoy.Ready(ctx, fe.AdminPort) },
		EnvoyStatsURL: fmt.Sprintf("http://127.0.0.1:%d/stats/prometheus", fe.AdminPort),
		Registry:      agentRegistry(),
	})
	testutil.EventuallyNoError(t, 20*time.Second, ReadyPath+" = 200", func() error {
		if code, _, body := get(t, http.MethodGet, base+ReadyPath); code != http.StatusOK {
			return fmt.Errorf("%d %q", code, body)
		}
		return nil
	})
	_, _, body := get(t, http.MethodGet, base+StatsPath)
	for _, want := range []string{"istio_agent_test_total 7", `envoy_cluster_upstream_cx_total{cluster_name="xds-grpc"} 3`} {
		if !strings.Contains(body, want) {
			t.Errorf("merged stats lack %q:\n%s", want, body)
		}
	}
}
