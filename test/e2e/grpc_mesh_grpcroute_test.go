package e2e

import (
	"math"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
)

// meshGRPCRouteConfig is meshRouteConfig with a GRPCRoute: UnaryCall of
// grpc.testing.TestService with x-canary: true goes to echo-b (method and
// header match), EmptyCall to the direct backend (a method the test never
// calls: its rule must not catch UnaryCall), the rest aWeight /
// 100-aWeight to echo-a and echo-b.
func meshGRPCRouteConfig(directPort, aPort, bPort, aWeight int) string {
	route := `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata:
  name: echo-grpc
  namespace: test
spec:
  parentRefs:
  - group: ""
    kind: Service
    name: echo
    port: 7070
  rules:
  - matches:
    - method:
        service: grpc.testing.TestService
        method: UnaryCall
      headers:
      - name: x-canary
        value: "true"
    backendRefs:
    - name: echo-b
      port: 7070
  - matches:
    - method:
        service: grpc.testing.TestService
        method: EmptyCall
    backendRefs:
    - name: echo
      port: 7070
  - backendRefs:
    - name: echo-a
      port: 7070
      weight: ` + strconv.Itoa(aWeight) + `
    - name: echo-b
      port: 7070
      weight: ` + strconv.Itoa(100-aWeight) + `
`
	return xdstest.Docs(xdstest.ServiceEntry("echo", xdstest.Endpoint{Port: directPort}), xdstest.ServiceEntry("echo-a", xdstest.Endpoint{Port: aPort}),
		xdstest.ServiceEntry("echo-b", xdstest.Endpoint{Port: bPort}), route)
}

// TestGRPCMeshGRPCRoute is TestGRPCMeshHTTPRoute through a GRPCRoute
// (issue 19's "proxyless grpc-go through a GRPCRoute"): grpc-go's own xDS
// client dials xds:///echo, routed only by a GRPCRoute with a Service
// parentRef. Real RPCs follow its method+header match and its 90/10
// weights, and a rewritten route is picked up.
func TestGRPCMeshGRPCRoute(t *testing.T) {
	direct, a, b := xdstest.StartBackend(t, "direct"), xdstest.StartBackend(t, "a"), xdstest.StartBackend(t, "b")
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh-grpcroute.yaml")
	xdstest.WriteFileAtomic(t, path, meshGRPCRouteConfig(direct, a, b, 90))
	srv := startServer(t, dir)
	ctx := t.Context()
	client := xdstest.Dial(t, srv.GRPCListenAddr(), "test", echoTarget)

	canary := xdstest.CountBackends(t, ctx, client, 100, "x-canary", "true")
	if canary["b"] != 100 {
		t.Errorf("UnaryCall with x-canary: true answered by %v, want all 100 from b (method and header match)", canary)
	}
	const n = 1000
	counts := xdstest.CountBackends(t, ctx, client, n)
	if counts["a"]+counts["b"] != n {
		t.Fatalf("answers %v: want only a and b (the EmptyCall rule must not catch UnaryCall)", counts)
	}
	tol := xdstest.BinomialTolerance(n, 0.9, 4)
	if want := 0.9 * n; math.Abs(float64(counts["a"])-want) > tol {
		t.Errorf("a answered %d of %d, want %.0f ± %.0f (90/10 split)", counts["a"], n, want, tol)
	}
	t.Logf("90/10 split over %d RPCs: %v (tolerance ±%.0f)", n, counts, tol)

	xdstest.WriteFileAtomic(t, path, meshGRPCRouteConfig(direct, a, b, 0))
	if err := xdstest.UntilStreak(ctx, client, "b", 100, 20*time.Second); err != nil {
		t.Fatalf("after rewriting the GRPCRoute to 0/100: %v", err)
	}
}
