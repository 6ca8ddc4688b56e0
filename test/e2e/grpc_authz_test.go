package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
)

// authzPolicies denies x-user: mallory and allows UnaryCall from loopback
// to the workloads of namespace secure; with onlyEmpty the ALLOW policy
// names EmptyCall instead, so UnaryCall is denied for everyone.
func authzPolicies(onlyEmpty bool) string {
	path := "/grpc.testing.TestService/UnaryCall"
	if onlyEmpty {
		path = "/grpc.testing.TestService/EmptyCall"
	}
	return fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: deny-mallory
  namespace: secure
spec:
  action: DENY
  rules:
  - when:
    - key: request.headers[x-user]
      values: ["mallory"]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: allow-unary
  namespace: secure
spec:
  action: ALLOW
  rules:
  - from:
    - source:
        ipBlocks: ["127.0.0.0/8"]
    to:
    - operation:
        paths: [%q]
`, path)
}

// callAs sends one UnaryCall over a fresh plaintext connection to
// 127.0.0.1:port with header x-user.
func callAs(ctx context.Context, t *testing.T, port int, user string) error {
	t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "x-user", user), 10*time.Second)
	defer cancel()
	_, err = testgrpc.NewTestServiceClient(conn).UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	return err
}

// TestGRPCXDSServerAuthorization: AuthorizationPolicies reach an
// xDS-enabled gRPC server as RBAC HTTP filters in its inbound listener;
// grpc-go enforces them, DENY before ALLOW, and picks up a policy change.
func TestGRPCXDSServerAuthorization(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "authz.yaml")
	xdstest.WriteFileAtomic(t, policyFile, authzPolicies(false))
	srv := startServer(t, dir)
	port := xdstest.StartXDSBackend(t, "secure-server", srv.GRPCListenAddr(), "secure")
	ctx := t.Context()

	if err := callAs(ctx, t, port, "alice"); err != nil {
		t.Fatalf("alice, allowed by allow-unary: %v", err)
	}
	if err := callAs(ctx, t, port, "mallory"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("mallory, denied by deny-mallory: got %v, want PermissionDenied", err)
	}

	xdstest.WriteFileAtomic(t, policyFile, authzPolicies(true))
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := callAs(ctx, t, port, "alice")
		if status.Code(err) == codes.PermissionDenied {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice after the ALLOW policy moved to EmptyCall: got %v, want PermissionDenied within 20s", err)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestCCoreXDSServerAuthorization: the same policies on an xDS-enabled gRPC
// server of gRPC C-core (Debian's python3-grpcio 1.51, which NACKs
// string_match header matchers): its listener's RBAC arrives in the older
// fields, C-core accepts it (no LDS NACK) and enforces it.
func TestCCoreXDSServerAuthorization(t *testing.T) {
	python := os.Getenv(envPython)
	if python == "" {
		t.Fatalf("%s is not set: run the tests through `hack/testenv.sh exec` after `make testenv` (it installs python3-grpcio)", envPython)
	}
	dir := t.TempDir()
	xdstest.WriteFileAtomic(t, filepath.Join(dir, "authz.yaml"), authzPolicies(false))
	srv := startServer(t, dir)
	bootstrapFile := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(bootstrapFile, xdstest.Bootstrap(t, srv.GRPCListenAddr(), "secure-py", "secure"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := testutil.FreePort(t)
	cmd := exec.Command(python, "proxyless/server.py", strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+bootstrapFile)
	var out testutil.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("server.py output:\n%s", out.String())
		}
	})
	ctx := t.Context()
	if err := callAs(ctx, t, port, "alice"); err != nil {
		t.Fatalf("alice, allowed by allow-unary: %v", err)
	}
	if err := callAs(ctx, t, port, "mallory"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("mallory, denied by deny-mallory (a header match): got %v, want PermissionDenied", err)
	}
	if v := bootstraptest.MetricValue(t, srv, "pilot_xds_lds_reject"); v != 0 {
		t.Errorf("%v LDS NACKs", v)
	}
}
