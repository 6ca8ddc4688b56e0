package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// bookinfoComEntry gives sidecars a 0.0.0.0_443 listener for *.bookinfo.com.
const bookinfoComEntry = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: bookinfo-com
  namespace: default
spec:
  hosts: ["*.bookinfo.com"]
  location: MESH_EXTERNAL
  ports:
  - {number: 443, name: tls, protocol: TLS}
  resolution: NONE
`

// bookinfoSNI is Istio's VirtualService reference example for tls routes,
// bound to the mesh.
const bookinfoSNI = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: bookinfo-sni
  namespace: default
spec:
  hosts: ["*.bookinfo.com"]
  gateways: [mygateway, mesh]
  tls:
  - match: [{port: 443, sniHosts: [login.bookinfo.com]}]
    route: [{destination: {host: login.prod.svc.cluster.local}}]
  - match: [{port: 443, sniHosts: [reviews.bookinfo.com]}]
    route: [{destination: {host: reviews.prod.svc.cluster.local}}]
`

// sniRoutes maps the SNI names of the filter chains of c's 0.0.0.0_443
// listener to their tcp_proxy clusters; nil without the listener or when
// it does not validate.
func sniRoutes(c *adsc.Client) map[string]string {
	ls, err := c.Decoded(model.ListenerType)
	if err != nil {
		return nil
	}
	l, _ := ls["0.0.0.0_443"].(*listenerv3.Listener)
	if l == nil || networkingtest.Validate(l) != nil {
		return nil
	}
	out := map[string]string{}
	for _, fc := range l.GetFilterChains() {
		var tp tcpv3.TcpProxy
		if len(fc.GetFilters()) != 1 || fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(&tp) != nil {
			return nil
		}
		for _, n := range fc.GetFilterChainMatch().GetServerNames() {
			out[n] = tp.GetCluster()
		}
	}
	return out
}

// A tls VirtualService written while a sidecar is connected reaches its
// listeners (a VirtualService change pushes LDS, not only RDS), and its
// removal restores the ServiceEntry's own SNI chain.
func TestSidecarTLSRouteApplied(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo"), dir)
	writeFile(t, filepath.Join(dir, "bookinfo-com.yaml"), bookinfoComEntry)
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	srv := bootstraptest.Start(t, opts)
	own := map[string]string{"*.bookinfo.com": "outbound|443||*.bookinfo.com"}
	routed := map[string]string{
		"login.bookinfo.com":   "outbound|443||login.prod.svc.cluster.local",
		"reviews.bookinfo.com": "outbound|443||reviews.prod.svc.cluster.local",
	}
	same := func(a, b map[string]string) bool {
		if len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if b[k] != v {
				return false
			}
		}
		return true
	}
	for _, delta := range []bool{false, true} {
		c := runClient(t, bootstraptest.Dial(t, srv.GRPCListenAddr()), adsc.Config{
			Node:  bootstraptest.SidecarNode(t, "productpage-v1", "default", "10.244.0.99", map[string]string{"app": "productpage"}),
			Delta: delta,
		})
		waitSNI := func(what string, want map[string]string) {
			t.Helper()
			ctx, stop := context.WithTimeout(t.Context(), 20*time.Second)
			defer stop()
			if err := c.WaitFor(ctx, func(c *adsc.Client) bool { return same(sniRoutes(c), want) }); err != nil {
				t.Fatalf("delta=%v: %s: %v; 0.0.0.0_443 chains %v, want %v", delta, what, err, sniRoutes(c), want)
			}
		}
		waitSNI("ServiceEntry's own chain", own)
		vs := filepath.Join(dir, "bookinfo-sni.yaml")
		writeFile(t, vs, bookinfoSNI)
		waitSNI("tls routes after the VirtualService was written", routed)
		if err := os.Remove(vs); err != nil {
			t.Fatal(err)
		}
		waitSNI("own chain after the VirtualService was removed", own)
	}
}
