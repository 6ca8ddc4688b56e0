package e2e

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
)

// flakyBackend fails every odd-numbered call with UNAVAILABLE and answers
// the others: without retries half the RPCs fail, with one retry none do.
// A call with metadata x-hang never answers (and is not counted).
type flakyBackend struct {
	testgrpc.UnimplementedTestServiceServer
	calls atomic.Int64
}

func (f *flakyBackend) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-hang")) > 0 {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if f.calls.Add(1)%2 == 1 {
		return nil, status.Error(codes.Unavailable, "flaky: try again")
	}
	return &testgrpc.SimpleResponse{Hostname: "flaky"}, nil
}

func startFlaky(t *testing.T) (*flakyBackend, int) {
	t.Helper()
	b := &flakyBackend{}
	return b, xdstest.Serve(t, "flaky", b)
}

const flakyTarget = "flaky.test.svc.cluster.local:7070"

// trafficConfig: echo's VirtualService aborts x-fault: abort with
// PERMISSION_DENIED and sends the rest to v1; flaky's gives x-hang: 1 a
// 200ms timeout, delays x-delay: 1 by a minute, and retries the rest on
// UNAVAILABLE twice.
func trafficConfig(flakyPort int) string {
	echo := xdstest.VirtualService("echo", `- name: abort
  match:
  - headers:
      x-fault:
        exact: abort
  fault:
    abort:
      grpcStatus: PERMISSION_DENIED
      percentage:
        value: 100
  route:
  - destination:
      host: echo.test.svc.cluster.local
      subset: v1
- route:
  - destination:
      host: echo.test.svc.cluster.local
      subset: v1
`)
	flaky := xdstest.VirtualService("flaky", `- name: hang
  match:
  - headers:
      x-hang:
        exact: "1"
  timeout: 0.2s
  retries:
    attempts: 0
  route:
  - destination:
      host: flaky.test.svc.cluster.local
- name: delay
  match:
  - headers:
      x-delay:
        exact: "1"
  fault:
    delay:
      fixedDelay: 60s
      percentage:
        value: 100
  route:
  - destination:
      host: flaky.test.svc.cluster.local
- retries:
    attempts: 2
    retryOn: unavailable
  route:
  - destination:
      host: flaky.test.svc.cluster.local
`)
	return xdstest.Docs(echo, xdstest.ServiceEntry("flaky", xdstest.Endpoint{Port: flakyPort}), flaky)
}

// TestGRPCXDSFaultTimeoutRetries: grpc-go's xDS client applies the
// VirtualService's fault abort (the configured gRPC status), its timeout
// (cutting a long injected delay short) and its retries.
func TestGRPCXDSFaultTimeoutRetries(t *testing.T) {
	v1, v2 := xdstest.StartBackend(t, "v1"), xdstest.StartBackend(t, "v2")
	flaky, flakyPort := startFlaky(t)
	dir := t.TempDir()
	xdstest.WriteFileAtomic(t, filepath.Join(dir, echoFile), xdstest.EchoConfig(v1, v2))
	xdstest.WriteFileAtomic(t, filepath.Join(dir, vsFile), trafficConfig(flakyPort))
	srv := startServer(t, dir)
	ctx := t.Context()
	client := xdstest.Dial(t, srv.GRPCListenAddr(), "test", echoTarget)

	if name, err := xdstest.Call(ctx, client); err != nil || name != "v1" {
		t.Fatalf("plain rpc: %q, %v; want v1", name, err)
	}

	t.Run("abort", func(t *testing.T) {
		_, err := xdstest.Call(ctx, client, "x-fault", "abort")
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("x-fault: abort: %v, want PERMISSION_DENIED from the fault filter", err)
		}
	})

	fc := xdstest.Dial(t, srv.GRPCListenAddr(), "test", flakyTarget)
	t.Run("retries", func(t *testing.T) {
		const n = 20
		before := flaky.calls.Load()
		for i := range n {
			if name, err := xdstest.Call(ctx, fc); err != nil || name != "flaky" {
				t.Fatalf("rpc %d: %q, %v: want every RPC retried to success", i+1, name, err)
			}
		}
		if got := flaky.calls.Load() - before; got != 2*n {
			t.Errorf("flaky backend saw %d attempts for %d RPCs, want %d (one retry each)", got, n, 2*n)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		// The caller's own deadline is far away: a DeadlineExceeded while it
		// has not passed comes from the route's max_stream_duration.
		callCtx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "x-hang", "1"), 30*time.Second)
		defer cancel()
		_, err := fc.UnaryCall(callCtx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		if status.Code(err) != codes.DeadlineExceeded || callCtx.Err() != nil {
			t.Errorf("x-hang: %v (caller context %v), want DeadlineExceeded from the 200ms route timeout", err, callCtx.Err())
		}
	})

	t.Run("delay", func(t *testing.T) {
		// Delayed by a minute, the RPC never reaches the backend before the
		// caller gives up.
		before := flaky.calls.Load()
		callCtx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "x-delay", "1"), 500*time.Millisecond)
		defer cancel()
		_, err := fc.UnaryCall(callCtx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		if status.Code(err) != codes.DeadlineExceeded || flaky.calls.Load() != before {
			t.Errorf("x-delay: %v, backend calls %d → %d: want the fault delay to hold the RPC", err, before, flaky.calls.Load())
		}
	})
}
