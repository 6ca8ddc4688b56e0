package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// reviewsSidecar is written like the examples of Istio's Sidecar
// reference: reviews accepts 9080 (HTTP, to its app on 127.0.0.1:8080)
// and 9090 (TCP, to a Unix domain socket), and calls out on 9080 to
// ratings only.
const reviewsSidecar = `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata:
  name: reviews
  namespace: default
spec:
  workloadSelector:
    labels:
      app: reviews
  ingress:
  - port:
      number: 9080
      protocol: HTTP
      name: somename
    defaultEndpoint: 127.0.0.1:8080
  - port:
      number: 9090
      protocol: TCP
      name: someuds
    defaultEndpoint: unix:///var/run/someuds.sock
  egress:
  - port:
      number: 9080
      protocol: HTTP
      name: egresshttp
    hosts:
    - "./ratings.default.svc.cluster.local"
  - hosts:
    - "istio-system/*"
`

// inboundEndpoint describes the endpoint address of an inbound cluster
// the client holds: "pipe:PATH" or "IP:PORT" (STATIC, a Sidecar ingress
// listener's defaultEndpoint), "original-dst" (a service's target port),
// or "" when absent.
func inboundEndpoint(c *adsc.Client, name string) string {
	a, ok := c.Resources(model.ClusterType)[name]
	if !ok {
		return ""
	}
	var cl clusterv3.Cluster
	if a.UnmarshalTo(&cl) != nil {
		return ""
	}
	if cl.GetType() == clusterv3.Cluster_ORIGINAL_DST {
		return "original-dst"
	}
	var addr *corev3.Address
	for _, g := range cl.GetLoadAssignment().GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			addr = e.GetEndpoint().GetAddress()
		}
	}
	if p := addr.GetPipe(); p != nil {
		return "pipe:" + p.GetPath()
	}
	sa := addr.GetSocketAddress()
	return fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
}

// TestSidecarIngressAndEgressPorts serves Bookinfo with a Sidecar for
// reviews from the config directory and checks, over SotW and Delta ADS,
// what the reviews-v1 sidecar receives; then removes the Sidecar and waits
// for the inbound side built from the reviews service to come back.
func TestSidecarIngressAndEgressPorts(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo"), dir)
			sidecarFile := filepath.Join(dir, "sidecar-reviews.yaml")
			writeFile(t, sidecarFile, reviewsSidecar)
			srv := startServer(t, dir)
			// reviews-v1's pod IP in examples/bookinfo/pods.yaml.
			node := bootstraptest.SidecarNode(t, "reviews-v1", "default", "10.244.0.13", map[string]string{"app": "reviews", "version": "v1"})
			c := runClient(t, bootstraptest.Dial(t, srv.GRPCListenAddr()), adsc.Config{Node: node, Delta: delta})

			for _, typ := range []string{model.ClusterType, model.ListenerType, model.RouteType, model.EndpointType} {
				res, err := c.Decoded(typ)
				if err != nil {
					t.Fatal(err)
				}
				for name, m := range res {
					if err := networkingtest.Validate(m); err != nil {
						t.Errorf("%s %s: %v", model.ShortType(typ), name, err)
					}
				}
			}
			if got := inboundEndpoint(c, "inbound|9080||"); got != "127.0.0.1:8080" {
				t.Errorf("inbound|9080|| endpoint %q, want the defaultEndpoint 127.0.0.1:8080", got)
			}
			if got := inboundEndpoint(c, "inbound|9090||"); got != "pipe:/var/run/someuds.sock" {
				t.Errorf("inbound|9090|| endpoint %q, want the Unix socket", got)
			}

			listeners, err := c.Decoded(model.ListenerType)
			if err != nil {
				t.Fatal(err)
			}
			vi, _ := listeners["virtualInbound"].(*listenerv3.Listener)
			ports := map[uint32]bool{}
			for _, fc := range vi.GetFilterChains() {
				ports[fc.GetFilterChainMatch().GetDestinationPort().GetValue()] = true
			}
			if !ports[9080] || !ports[9090] {
				t.Errorf("virtualInbound chains match ports %v, want 9080 and 9090", ports)
			}

			routes, err := c.Decoded(model.RouteType)
			if err != nil {
				t.Fatal(err)
			}
			rc, _ := routes["9080"].(*routev3.RouteConfiguration)
			var hosts []string
			for _, vh := range rc.GetVirtualHosts() {
				hosts = append(hosts, vh.GetName())
			}
			if want := []string{"ratings.default.svc.cluster.local:9080", "allow_any"}; !slices.Equal(hosts, want) {
				t.Errorf("route 9080 virtual hosts %v, want %v (the egress listener of 9080 selects ratings only)", hosts, want)
			}

			// Without the Sidecar, inbound comes from the reviews service again.
			if err := os.Remove(sidecarFile); err != nil {
				t.Fatal(err)
			}
			wait, stop := context.WithTimeout(t.Context(), 20*time.Second)
			defer stop()
			if err := c.WaitFor(wait, func(c *adsc.Client) bool {
				return inboundEndpoint(c, "inbound|9080||") == "original-dst" && inboundEndpoint(c, "inbound|9090||") == ""
			}); err != nil {
				t.Fatalf("removing the Sidecar never reached the proxy: %v (inbound|9080|| now %q)", err, inboundEndpoint(c, "inbound|9080||"))
			}
		})
	}
}
