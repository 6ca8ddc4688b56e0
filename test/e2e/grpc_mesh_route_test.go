package e2e

import (
	"math"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
)

// meshRouteConfig: ServiceEntries echo, echo-a and echo-b (one backend
// each; echo's, direct, answers only if the route is not applied), and an
// HTTPRoute whose parentRef is Service echo: x-canary: true goes to
// echo-b, the rest aWeight / 100-aWeight to echo-a and echo-b.
func meshRouteConfig(directPort, aPort, bPort, aWeight int) string {
	route := `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: echo-split
  namespace: test
spec:
  parentRefs:
  - group: ""
    kind: Service
    name: echo
    port: 7070
  rules:
  - matches:
    - headers:
      - name: x-canary
        value: "true"
    backendRefs:
    - name: echo-b
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

// TestGRPCMeshHTTPRoute is issue 19's mesh traffic check: grpc-go's own
// xDS client dials xds:///echo, whose only routing is a Gateway API
// HTTPRoute with a Service parentRef (GAMMA) read from the config
// directory. Real RPCs follow the route's header match and its 90/10
// weights, and a rewritten route is picked up.
func TestGRPCMeshHTTPRoute(t *testing.T) {
	checkMeshRouteTraffic(t, "mesh-route.yaml", meshRouteConfig)
}

// checkMeshRouteTraffic serves config(direct, a, b, 90) from a config
// directory and checks, with grpc-go's xDS client on xds:///echo, that
// x-canary: true goes to b, the rest 90/10 to a and b (within 4 standard
// deviations over 1,000 RPCs), and that config(..., 0) sends all to b.
func checkMeshRouteTraffic(t *testing.T, file string, config func(direct, a, b, aWeight int) string) {
	direct, a, b := xdstest.StartBackend(t, "direct"), xdstest.StartBackend(t, "a"), xdstest.StartBackend(t, "b")
	dir := t.TempDir()
	path := filepath.Join(dir, file)
	xdstest.WriteFileAtomic(t, path, config(direct, a, b, 90))
	srv := startServer(t, dir)
	ctx := t.Context()
	client := xdstest.Dial(t, srv.GRPCListenAddr(), "test", echoTarget)

	canary := xdstest.CountBackends(t, ctx, client, 100, "x-canary", "true")
	if canary["b"] != 100 {
		t.Errorf("x-canary: true answers %v, want all 100 from b (the header match)", canary)
	}

	const n = 1000
	counts := xdstest.CountBackends(t, ctx, client, n)
	if counts["a"]+counts["b"] != n {
		t.Fatalf("answers %v: want only a and b", counts)
	}
	// 4 standard deviations of the binomial count: a false failure is ~1
	// in 16,000 runs.
	tol := xdstest.BinomialTolerance(n, 0.9, 4)
	if want := 0.9 * n; math.Abs(float64(counts["a"])-want) > tol {
		t.Errorf("a answered %d of %d, want %.0f ± %.0f (90/10 split)", counts["a"], n, want, tol)
	}
	t.Logf("90/10 split over %d RPCs: %v (tolerance ±%.0f)", n, counts, tol)

	xdstest.WriteFileAtomic(t, path, config(direct, a, b, 0))
	if err := xdstest.UntilStreak(ctx, client, "b", 100, 20*time.Second); err != nil {
		t.Fatalf("after rewriting the route to 0/100: %v", err)
	}
}
