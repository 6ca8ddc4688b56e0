package gateway_test

import (
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

const fileRouteKindsYAML = `apiVersion: v1
kind: Service
metadata: {name: db, namespace: gwl4}
spec:
  clusterIP: 10.96.7.8
  ports: [{name: tcp, port: 5432}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: istio}
spec: {controllerName: istio.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: gwl4}
spec:
  gatewayClassName: istio
  listeners:
  - {name: tls, port: 443, protocol: TLS, hostname: "*.example.com", tls: {mode: Passthrough}}
  - {name: tcp, port: 5432, protocol: TCP}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: db, namespace: gwl4}
spec:
  parentRefs: [{name: gw, sectionName: tls}]
  hostnames: [db.example.com]
  rules:
  - backendRefs: [{name: db, port: 5432}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: db, namespace: gwl4}
spec:
  parentRefs: [{name: gw, sectionName: tcp}]
  rules:
  - backendRefs: [{name: db, port: 5432}]
`

// TestFileModeGatewayAPIRouteKinds: in a config directory, a Gateway with
// a TLS Passthrough and a TCP listener, a TLSRoute (v1alpha2, as the
// experimental channel serves it) and a TCPRoute give the Gateway's proxy
// an SNI-matched chain on 443 and a plain chain on 5432, both proxying
// TCP to the Service's cluster.
func TestFileModeGatewayAPIRouteKinds(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, dir, "gateway.yaml", fileRouteKindsYAML)
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	srv := bootstraptest.Start(t, opts)
	c := bootstraptest.RunClient(t, srv, adsc.Config{
		Node:  gatewayNode(t, "gwl4", "gw", "10.244.3.3"),
		Types: []string{model.ClusterType, model.ListenerType},
	})
	const cluster = "outbound|5432||db.gwl4.svc.cluster.local"
	// proxied returns the SNI names of the listener's chain proxying to
	// cluster, "-" for a chain without names, "" when none does.
	proxied := func(c *adsc.Client, name string) string {
		a := c.Resources(model.ListenerType)[name]
		if a == nil {
			return ""
		}
		l := &listenerv3.Listener{}
		if err := a.UnmarshalTo(l); err != nil {
			return ""
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				tp := &tcpv3.TcpProxy{}
				if f.GetTypedConfig().UnmarshalTo(tp) != nil || tp.GetCluster() != cluster {
					continue
				}
				if names := fc.GetFilterChainMatch().GetServerNames(); len(names) > 0 {
					return names[0]
				}
				return "-"
			}
		}
		return ""
	}
	bootstraptest.WaitClient(t, c, "listener 0.0.0.0_443 with SNI db.example.com to "+cluster, func(c *adsc.Client) bool {
		return proxied(c, "0.0.0.0_443") == "db.example.com"
	})
	bootstraptest.WaitClient(t, c, "listener 0.0.0.0_5432 to "+cluster, func(c *adsc.Client) bool {
		return proxied(c, "0.0.0.0_5432") == "-"
	})
}
