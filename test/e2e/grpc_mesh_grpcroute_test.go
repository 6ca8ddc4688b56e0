package e2e

import (
	"strconv"
	"testing"

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
// parentRef. Real RPCs follow its method+header match (and not the
// EmptyCall rule) and its 90/10 weights, and a rewritten route is picked up.
func TestGRPCMeshGRPCRoute(t *testing.T) {
	checkMeshRouteTraffic(t, "mesh-grpcroute.yaml", meshGRPCRouteConfig)
}
