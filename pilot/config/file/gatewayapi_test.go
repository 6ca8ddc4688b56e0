package file

import (
	"strings"
	"testing"
)

// TestGatewayAPIObjects: the Gateway API kinds are read into
// Snapshot.GatewayAPI (GatewayClass without a namespace, the others in the
// default one), a Gateway API Gateway and an Istio Gateway of the same
// name are two objects, and an unknown field is an error naming it.
func TestGatewayAPIObjects(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: istio}
spec: {controllerName: istio.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: web}
spec:
  servers: [{port: {number: 81, name: http, protocol: HTTP}, hosts: ["*"]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web}
spec:
  parentRefs: [{name: web}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: any, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]
  to: [{group: "", kind: Service}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: typo}
spec:
  parentRefz: [{name: web}]
`)
	snap, err := newTestLoader(dir, testLogger(t)).Load()
	if err != nil {
		t.Fatal(err)
	}
	g := snap.GatewayAPI
	if len(g.GatewayClasses) != 1 || g.GatewayClasses[0].Namespace != "" {
		t.Errorf("GatewayClasses %v, want istio without a namespace", g.GatewayClasses)
	}
	if len(g.Gateways) != 1 || g.Gateways[0].Namespace != "default" || len(g.Gateways[0].Spec.Listeners) != 1 {
		t.Errorf("Gateways %v, want default/web with its listener", g.Gateways)
	}
	if len(g.HTTPRoutes) != 1 || g.HTTPRoutes[0].Name != "web" || len(g.ReferenceGrants) != 1 {
		t.Errorf("HTTPRoutes %d (want web only), ReferenceGrants %d (want 1)", len(g.HTTPRoutes), len(g.ReferenceGrants))
	}
	if len(snap.Configs) != 1 || snap.Configs[0].Kind != "Gateway" {
		t.Errorf("Istio configs %v, want the Istio Gateway", snap.Configs)
	}
	if len(snap.Errors) != 1 || !strings.Contains(snap.Errors[0].Error(), "parentRefz") {
		t.Errorf("errors %v, want one naming parentRefz", snap.Errors)
	}
}
