package e2e

import (
	"path/filepath"
	"testing"

	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
)

// trafficPolicyConfig is the echo ServiceEntry with a DestinationRule that
// uses every policy grpc-go carries out: consistentHash (RING_HASH) on the
// whole service and subset v2, LEAST_REQUEST on subset v1, a circuit
// breaker (http2MaxRequests) and outlier detection.
func trafficPolicyConfig(v1Port, v2Port int) string {
	return xdstest.Docs(xdstest.EchoServiceEntry(v1Port, v2Port), xdstest.DestinationRule("echo", `trafficPolicy:
  loadBalancer:
    consistentHash:
      httpHeaderName: x-user
      ringHash:
        minimumRingSize: 1024
  connectionPool:
    http:
      http2MaxRequests: 100
  outlierDetection:
    consecutive5xxErrors: 5
    interval: 10s
    baseEjectionTime: 30s
    maxEjectionPercent: 50
subsets:
- name: v1
  labels:
    version: v1
  trafficPolicy:
    loadBalancer:
      simple: LEAST_REQUEST
- name: v2
  labels:
    version: v2
`))
}

// TestGRPCXDSTrafficPolicy: grpc-go's xDS client accepts the RING_HASH,
// LEAST_REQUEST, circuit-breaker and outlier-detection clusters the
// DestinationRule produces and routes real RPCs through each of them.
func TestGRPCXDSTrafficPolicy(t *testing.T) {
	v1Port, v2Port := xdstest.StartBackend(t, "v1"), xdstest.StartBackend(t, "v2")
	dir := t.TempDir()
	xdstest.WriteFileAtomic(t, filepath.Join(dir, echoFile), trafficPolicyConfig(v1Port, v2Port))
	xdstest.WriteFileAtomic(t, filepath.Join(dir, vsFile), xdstest.CanaryVirtualService(100))
	srv := startServer(t, dir)
	client := xdstest.Dial(t, srv.GRPCListenAddr(), "test", echoTarget)
	ctx := t.Context()
	if counts := xdstest.CountBackends(t, ctx, client, 20); counts["v1"] != 20 {
		t.Errorf("subset v1 (LEAST_REQUEST): answers %v, want all 20 from v1", counts)
	}
	if counts := xdstest.CountBackends(t, ctx, client, 20, "x-canary", "true", "x-user", "jason"); counts["v2"] != 20 {
		t.Errorf("subset v2 (RING_HASH): answers %v, want all 20 from v2", counts)
	}
}
