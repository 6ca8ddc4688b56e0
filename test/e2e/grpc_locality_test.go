package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
)

// stoppableBackend serves a named TestService on 127.0.0.1:0 and returns its
// port and a stop function (also run when the test ends).
func stoppableBackend(t *testing.T, name string) (int, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("backend %s: listen: %v", name, err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, &xdstest.Backend{Name: name})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("backend %s: serve: %v", name, err)
		}
	}
	t.Cleanup(stop)
	return lis.Addr().(*net.TCPAddr).Port, stop
}

// dialFrom opens an xds:/// channel to xdstest.EchoTarget for a proxyless
// client in namespace test whose xDS node carries locality
// "region/zone" and the workload labels (ISTIO_META_LABELS / LABELS).
func dialFrom(t *testing.T, addr, region, zone string, labels map[string]string) xdstest.Client {
	t.Helper()
	return xdstest.DialBootstrap(t, xdstest.BootstrapNode(t, addr, map[string]any{
		"id":       "sidecar~127.0.0.1~client.test~test.svc.cluster.local",
		"locality": map[string]any{"region": region, "zone": zone},
		"metadata": map[string]any{"GENERATOR": "grpc", "NAMESPACE": "test", "LABELS": labels},
	}), xdstest.EchoTarget)
}

// localityConfig is the echo ServiceEntry with backend near in
// region1/zone1 (label site: a) and far in region2/zone2 (site: b), and a
// DestinationRule with outlier detection and localityLbSetting lb (YAML
// from column 0, indented under localityLbSetting).
func localityConfig(nearPort, farPort int, lb string) string {
	se := xdstest.ServiceEntry("echo",
		xdstest.Endpoint{Port: nearPort, Locality: "region1/zone1", Labels: map[string]string{"site": "a"}},
		xdstest.Endpoint{Port: farPort, Locality: "region2/zone2", Labels: map[string]string{"site": "b"}})
	dr := xdstest.DestinationRule("echo", `trafficPolicy:
  outlierDetection:
    consecutive5xxErrors: 5
    interval: 10s
    baseEjectionTime: 30s
  loadBalancer:
    localityLbSetting:
`+"      "+strings.ReplaceAll(strings.TrimRight(lb, "\n"), "\n", "\n      ")+"\n")
	return xdstest.Docs(se, dr)
}

// untilFailedOver sends RPCs until want answered streak in a row, and
// fails when within passes first. RPCs cut off while the client switches
// priorities fail and restart the streak instead of ending the wait.
func untilFailedOver(ctx context.Context, c xdstest.Client, want string, streak int, within time.Duration) error {
	deadline := time.Now().Add(within)
	run, sent := 0, 0
	var last error
	for run < streak {
		if time.Now().After(deadline) {
			return fmt.Errorf("no %d consecutive answers from %s within %v (%d RPCs sent, last run %d, last error %v)", streak, want, within, sent, run, last)
		}
		name, err := xdstest.Call(ctx, c)
		sent++
		switch {
		case err != nil:
			last, run = err, 0
		case name == want:
			run++
		default:
			run = 0
		}
	}
	return nil
}

// TestGRPCXDSLocalityFailover is the acceptance test of locality load
// balancing for proxyless gRPC: grpc-go's xDS client, given EDS priorities
// for its node's locality (failover) or its labels (failoverPriority),
// sends every RPC to the preferred backend, and fails over to the other
// once the preferred one stops.
func TestGRPCXDSLocalityFailover(t *testing.T) {
	cases := []struct {
		name   string
		lb     string
		region string
		labels map[string]string
	}{
		// The client is in region1/zone1 with near: near is priority 0.
		{"failover", "enabled: true\nfailover:\n- from: region1\n  to: region2\n", "region1", nil},
		// The client's locality is far's, but failoverPriority on the
		// site label prefers near (site: a like the client).
		{"failoverPriority", "enabled: true\nfailoverPriority:\n- site\n", "region2", map[string]string{"site": "a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nearPort, stopNear := stoppableBackend(t, "near")
			farPort, _ := stoppableBackend(t, "far")
			dir := t.TempDir()
			xdstest.WriteFileAtomic(t, filepath.Join(dir, echoFile), localityConfig(nearPort, farPort, c.lb))
			srv := startServer(t, dir)
			zone := "zone1"
			if c.region == "region2" {
				zone = "zone2"
			}
			client := dialFrom(t, srv.GRPCListenAddr(), c.region, zone, c.labels)
			ctx := t.Context()
			// Round robin over both would alternate: 50 in a row from near
			// means far is at a lower priority.
			if counts := xdstest.CountBackends(t, ctx, client, 50); counts["near"] != 50 {
				t.Fatalf("before stopping near: answers %v, want all 50 from near", counts)
			}
			stopNear()
			if err := untilFailedOver(ctx, client, "far", 50, 30*time.Second); err != nil {
				t.Fatalf("after stopping near: %v", err)
			}
		})
	}
}
