package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"

	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
)

// TestProxylessThroughAgent: with DISABLE_ENVOY the agent serves a
// proxyless grpc-go application: its gRPC xDS bootstrap points grpc-go at
// the agent's xDS socket, the agent relays to the control plane over TLS
// with the pod's token, and real RPCs follow the VirtualService. The
// workload certificate is written to OUTPUT_CERTS for grpc-go's
// file_watcher, and the agent is ready once xDS is connected.
func TestProxylessThroughAgent(t *testing.T) {
	configDir := t.TempDir()
	v1, v2 := xdstest.StartBackend(t, "v1"), xdstest.StartBackend(t, "v2")
	writeFile(t, configDir, "echo.yaml", xdstest.EchoConfig(v1, v2))
	writeFile(t, configDir, "echo-vs.yaml", xdstest.CanaryVirtualService(100))
	srv := bootstraptest.Start(t, controlPlaneOptions(t, configDir, ""))
	dir := podDir(t, srv)
	vars, _, status := sidecarEnv(t, srv.SecureGRPCListenAddr(), "/nonexistent/envoy", map[string]string{
		"DISABLE_ENVOY": "true", "OUTPUT_CERTS": filepath.Join(dir, "certs"),
		"GRPC_XDS_BOOTSTRAP": filepath.Join(dir, "grpc-bootstrap.json"),
	})
	agent := startAgent(t, dir, vars)

	var bootstrapJSON []byte
	waitFor(t, 30*time.Second, "the agent's gRPC xDS bootstrap", func() bool {
		var err error
		bootstrapJSON, err = os.ReadFile(filepath.Join(dir, "grpc-bootstrap.json"))
		return err == nil
	})
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrapJSON)
	if err != nil {
		t.Fatalf("grpc-go rejected the agent's bootstrap: %v", err)
	}
	conn, err := grpc.NewClient("xds:///"+xdstest.EchoTarget, grpc.WithResolvers(resolver),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if got := xdstest.CountBackends(t, ctx, client, 20); got["v1"] != 20 {
		t.Fatalf("100%% to v1 by the VirtualService, got %v", got)
	}
	if got := xdstest.CountBackends(t, ctx, client, 20, "x-canary", "true"); got["v2"] != 20 {
		t.Fatalf("x-canary: true to v2, got %v", got)
	}

	waitFor(t, 30*time.Second, "/healthz/ready = 200 without Envoy", func() bool {
		return httpStatus(fmt.Sprintf("http://127.0.0.1:%d/healthz/ready", status)) == http.StatusOK
	})
	stats := httpBody(t, fmt.Sprintf("http://127.0.0.1:%d/stats/prometheus", status))
	if !strings.Contains(stats, `istio_agent_num_outgoing_requests{request_type="csr"} 1`) {
		t.Errorf("/stats/prometheus lacks the agent's CSR count:\n%.2000s", stats)
	}
	for _, f := range []string{"cert-chain.pem", "key.pem", "root-cert.pem"} {
		if _, err := os.Stat(filepath.Join(dir, "certs", f)); err != nil {
			t.Errorf("OUTPUT_CERTS: %v", err)
		}
	}
	chain, err := os.ReadFile(filepath.Join(dir, "certs", "cert-chain.pem"))
	if err != nil {
		t.Fatal(err)
	}
	verifyWorkloadSecret(t, chain, srv.Authority().Bundle().RootPEM)

	if err := agent.stop(t); err != nil {
		t.Fatalf("pilot-agent exit after SIGTERM: %v", err)
	}
}

func httpBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
