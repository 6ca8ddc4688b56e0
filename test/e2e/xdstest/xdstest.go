// Package xdstest runs grpc-go's real xDS client against a discovery
// server in tests: local TestService backends, an xds:/// channel with its
// own bootstrap, and RPC counting helpers.
package xdstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"

	"github.com/meshpilot/meshpilot/pilot/networking/grpcgen"
)

// Client is the TestService client the helpers drive.
type Client = testgrpc.TestServiceClient

// Backend is a TestService that answers every UnaryCall with its name.
type Backend struct {
	testgrpc.UnimplementedTestServiceServer
	// Name is returned in SimpleResponse.hostname.
	Name string
}

// UnaryCall answers with the backend's name.
func (b *Backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Hostname: b.Name}, nil
}

// StartBackend serves a named TestService on 127.0.0.1:0 until the test ends
// and returns its port.
func StartBackend(t testing.TB, name string) int {
	t.Helper()
	return Serve(t, name, &Backend{Name: name})
}

// Serve serves impl as the TestService (named name in failures) on
// 127.0.0.1:0 without xDS until the test ends and returns its port.
func Serve(t testing.TB, name string, impl testgrpc.TestServiceServer) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("backend %s: listen: %v", name, err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, impl)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("backend %s: serve: %v", name, err)
		}
	})
	return lis.Addr().(*net.TCPAddr).Port
}

// StartXDSBackend serves a named TestService with grpc-go's xDS-enabled
// server on 127.0.0.1:0, configured by the discovery server at addr as a
// workload of namespace ns, and returns its port once it is serving (it
// fails the test if the listener is not accepted within 10 s).
func StartXDSBackend(t testing.TB, name, addr, ns string) int {
	t.Helper()
	modes := make(chan xds.ServingModeChangeArgs, 16)
	srv, err := xds.NewGRPCServer(
		grpc.Creds(insecure.NewCredentials()),
		xds.BootstrapContentsForTesting(Bootstrap(t, addr, name, ns)),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) {
			select {
			case modes <- args:
			default:
			}
		}),
	)
	if err != nil {
		t.Fatalf("xds backend %s: %v", name, err)
	}
	testgrpc.RegisterTestServiceServer(srv, &Backend{Name: name})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("xds backend %s: listen: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("xds backend %s: serve: %v", name, err)
		}
	})
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	var last error
	for {
		select {
		case m := <-modes:
			if m.Mode == connectivity.ServingModeServing {
				return lis.Addr().(*net.TCPAddr).Port
			}
			last = m.Err
		case <-timeout.C:
			t.Fatalf("xds backend %s: not serving within 10s (last error: %v)", name, last)
		}
	}
}

// CallDirect sends one RPC to 127.0.0.1:port without xDS and returns the
// name of the backend that answered.
func CallDirect(ctx context.Context, t testing.TB, port int) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return Call(ctx, testgrpc.NewTestServiceClient(conn))
}

// Bootstrap is grpc-go's xDS bootstrap for a proxyless workload (pod in
// namespace ns) talking plaintext to the discovery server at addr. Like
// Istio's agent it sets the server listener name template, so xDS-enabled
// servers ask for Istio's inbound listener names.
func Bootstrap(t testing.TB, addr, pod, ns string) []byte {
	t.Helper()
	return BootstrapNode(t, addr, map[string]any{
		"id":       fmt.Sprintf("sidecar~127.0.0.1~%s.%s~%s.svc.cluster.local", pod, ns, ns),
		"metadata": map[string]any{"GENERATOR": "grpc", "NAMESPACE": ns},
	})
}

// BootstrapNode is Bootstrap with the xDS node given whole (id, metadata,
// locality as grpc-go's bootstrap JSON spells them).
func BootstrapNode(t testing.TB, addr string, node map[string]any) []byte {
	t.Helper()
	cfg := map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      addr,
			"channel_creds":   []any{map[string]any{"type": "insecure"}},
			"server_features": []any{"xds_v3"},
		}},
		"server_listener_resource_name_template": grpcgen.InboundListenerPrefix + "%s",
		"node":                                   node,
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	return raw
}

// Dial opens an xds:/// channel to target for a client in namespace ns
// through the discovery server at addr, with its own xDS client (no process-global bootstrap).
func Dial(t testing.TB, addr, ns, target string) Client {
	t.Helper()
	return DialBootstrap(t, Bootstrap(t, addr, "client", ns), target)
}

// DialBootstrap opens an xds:/// channel to target with its own xDS client
// configured by the bootstrap JSON raw; it closes when the test ends.
func DialBootstrap(t testing.TB, raw []byte, target string) Client {
	t.Helper()
	builder, err := xds.NewXDSResolverWithConfigForTesting(raw)
	if err != nil {
		t.Fatalf("xds resolver: %v", err)
	}
	conn, err := grpc.NewClient("xds:///"+target, grpc.WithResolvers(builder),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial xds:///%s: %v", target, err)
	}
	t.Cleanup(func() { conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// Call sends one RPC (waiting for the channel to become ready) and returns
// the name of the backend that answered.
func Call(ctx context.Context, c Client, md ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return "", err
	}
	return resp.GetHostname(), nil
}

// CountBackends sends n RPCs and counts answers per backend.
func CountBackends(t testing.TB, ctx context.Context, c Client, n int, md ...string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		name, err := Call(ctx, c, md...)
		if err != nil {
			t.Fatalf("rpc %d of %d (metadata %v): %v", i+1, n, md, err)
		}
		counts[name]++
	}
	return counts
}

// BinomialTolerance is k standard deviations of a count of n draws with probability p.
func BinomialTolerance(n int, p, k float64) float64 {
	return k * math.Sqrt(float64(n)*p*(1-p))
}

// WriteFileAtomic replaces path with content in one rename, so a watcher
// never reads a half-written file.
func WriteFileAtomic(t testing.TB, path, content string) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatalf("write %s: %v", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("rename to %s: %v", path, err)
	}
}

// UntilStreak sends RPCs until backend want answered streak in a row, and
// fails when within passes first.
func UntilStreak(ctx context.Context, c Client, want string, streak int, within time.Duration) error {
	return Until(ctx, c, func(name string) bool { return name == want }, streak, within)
}

// Until sends RPCs until ok holds for streak answers in a row, and fails
// when within passes first.
func Until(ctx context.Context, c Client, ok func(backend string) bool, streak int, within time.Duration) error {
	deadline := time.Now().Add(within)
	run, sent := 0, 0
	for run < streak {
		if time.Now().After(deadline) {
			return fmt.Errorf("no %d consecutive matching answers within %v (%d RPCs sent, last run %d)", streak, within, sent, run)
		}
		name, err := Call(ctx, c)
		if err != nil {
			return fmt.Errorf("rpc %d: %w", sent+1, err)
		}
		sent++
		if ok(name) {
			run++
		} else {
			run = 0
		}
	}
	return nil
}
