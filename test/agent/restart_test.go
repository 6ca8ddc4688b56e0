package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// copyDir copies the regular files of src into a new temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dst, e.Name(), string(b))
	}
	return dst
}

func serviceEntry(name string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: %[1]s
  namespace: default
spec:
  hosts: [%[1]s.example.com]
  location: MESH_EXTERNAL
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
`, name)
}

// TestControlPlaneRestart: the control plane goes away and comes back on the
// same address; the agent reconnects and the stand-in Envoy's stream
// carries on, receiving a change made after the restart.
func TestControlPlaneRestart(t *testing.T) {
	configDir := copyDir(t, filepath.Join(fixtures.RepoRoot(t), "examples/bookinfo"))
	secureAddr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	opts := controlPlaneOptions(t, configDir, secureAddr)
	srv, stop := bootstraptest.StartStoppable(t, opts)
	dir := podDir(t, srv)
	vars, _, _ := sidecarEnv(t, secureAddr, build(t, "pilot/agent/envoy/fakeenvoy"), nil)
	startAgent(t, dir, vars)

	client, streamDone := envoyClient(t, dir)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := client.WaitFor(ctx, hasCluster(reviewsCluster)); err != nil {
		t.Fatalf("config through the agent: %v", err)
	}

	stop()
	writeFile(t, configDir, "after-restart.yaml", serviceEntry("after-restart"))
	bootstraptest.StartStoppable(t, opts) // same address, same root (Secret istio-ca-secret)

	if err := client.WaitFor(ctx, hasCluster("outbound|443||after-restart.example.com")); err != nil {
		t.Fatalf("a change after the restart never reached the client: %v", err)
	}
	select {
	case err := <-streamDone:
		t.Fatalf("the client's stream ended across the restart: %v", err)
	default:
	}
	if err := client.WaitFor(ctx, hasCluster(reviewsCluster)); err != nil {
		t.Fatalf("lost the earlier config: %v", err)
	}
}
