// Package e2e holds acceptance tests of the whole discovery server with real
// clients: grpc-go's xDS resolver routes real RPCs to local backends through
// the configuration the server generates.
package e2e

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
)

// The dialled target and the config files startEcho writes.
const (
	echoTarget = xdstest.EchoTarget
	echoFile   = "echo.yaml"
	vsFile     = "echo-vs.yaml"
)

// startEcho starts backends v1 and v2, writes the echo ServiceEntry,
// DestinationRule and an 80/20 canary VirtualService to a config directory
// and serves it. It returns the server and the config directory.
func startEcho(t *testing.T) (srv *bootstrap.Server, dir string) {
	t.Helper()
	v1Port, v2Port := xdstest.StartBackend(t, "v1"), xdstest.StartBackend(t, "v2")
	dir = t.TempDir()
	xdstest.WriteFileAtomic(t, filepath.Join(dir, echoFile), xdstest.EchoConfig(v1Port, v2Port))
	xdstest.WriteFileAtomic(t, filepath.Join(dir, vsFile), xdstest.CanaryVirtualService(80))
	return startServer(t, dir), dir
}

// TestGRPCXDSWeightedRouting is the acceptance test of the proxyless gRPC
// path: grpc-go's own xDS client resolves xds:///echo through the server,
// follows the VirtualService's header match and 80/20 split to real
// backends, and picks up a VirtualService change from the config directory.
func TestGRPCXDSWeightedRouting(t *testing.T) {
	srv, dir := startEcho(t)
	client := xdstest.Dial(t, srv.GRPCListenAddr(), "test", echoTarget)
	ctx := t.Context()

	const n = 500
	counts := xdstest.CountBackends(t, ctx, client, n)
	if counts["v1"]+counts["v2"] != n {
		t.Fatalf("answers %v: want only v1 and v2", counts)
	}
	// 4 standard deviations of the binomial count: a false failure is ~1 in 16,000 runs.
	tol := xdstest.BinomialTolerance(n, 0.8, 4)
	if want := 0.8 * n; math.Abs(float64(counts["v1"])-want) > tol {
		t.Errorf("v1 answered %d of %d, want %.0f ± %.0f (80%% split)", counts["v1"], n, want, tol)
	}
	t.Logf("80/20 split: %v", counts)

	canary := xdstest.CountBackends(t, ctx, client, 100, "x-canary", "true")
	if canary["v2"] != 100 {
		t.Errorf("x-canary: true answers %v, want all 100 from v2", canary)
	}

	xdstest.WriteFileAtomic(t, filepath.Join(dir, vsFile), xdstest.CanaryVirtualService(0))
	if err := xdstest.UntilStreak(ctx, client, "v2", 100, 20*time.Second); err != nil {
		t.Fatalf("after rewriting the VirtualService to 100%% v2: %v", err)
	}
}

// TestGRPCXDSTargetNames: Istio's short names resolve in the client's
// namespace. (A name no service backs is left out of LDS; grpc-go only
// declares it missing after its 15 s resource timer, too slow to test here:
// the grpcgen unit tests check the omission.)
func TestGRPCXDSTargetNames(t *testing.T) {
	srv, _ := startEcho(t)
	ctx := t.Context()
	for _, target := range []string{"echo:7070", "echo.test:7070", "echo.test.svc:7070"} {
		client := xdstest.Dial(t, srv.GRPCListenAddr(), "test", target)
		counts := xdstest.CountBackends(t, ctx, client, 20)
		if counts["v1"]+counts["v2"] != 20 {
			t.Errorf("xds:///%s answers %v: want only v1 and v2", target, counts)
		}
	}
}

// TestGRPCXDSEndpointChange: moving the v1 endpoint of the ServiceEntry to
// another backend reaches the client's EDS, and the old backend stops
// receiving traffic.
func TestGRPCXDSEndpointChange(t *testing.T) {
	srv, dir := startEcho(t)
	ctx := t.Context()
	client := xdstest.Dial(t, srv.GRPCListenAddr(), "test", echoTarget)
	if counts := xdstest.CountBackends(t, ctx, client, 50); counts["v1"] == 0 {
		t.Fatalf("before the change: answers %v, want some from v1", counts)
	}
	v1b, v2 := xdstest.StartBackend(t, "v1b"), xdstest.StartBackend(t, "v2b")
	xdstest.WriteFileAtomic(t, filepath.Join(dir, echoFile), xdstest.EchoConfig(v1b, v2))
	// 80% go to subset v1: 100 answers in a row from the new backends
	// cannot happen while the old v1 endpoint is still in use.
	moved := func(name string) bool { return name == "v1b" || name == "v2b" }
	if err := xdstest.Until(ctx, client, moved, 100, 20*time.Second); err != nil {
		t.Fatalf("after moving the endpoints: %v", err)
	}
}

// TestGRPCXDSServer: an xDS-enabled gRPC server gets its inbound listener
// (Istio's name template) from the discovery server, starts serving, and
// accepts RPCs through the generated inline route.
func TestGRPCXDSServer(t *testing.T) {
	srv, _ := startEcho(t)
	port := xdstest.StartXDSBackend(t, "xds-server", srv.GRPCListenAddr(), "test")
	name, err := xdstest.CallDirect(t.Context(), t, port)
	if err != nil || name != "xds-server" {
		t.Fatalf("rpc to the xDS-enabled server: %q, %v", name, err)
	}
}
