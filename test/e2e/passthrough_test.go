package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// crossNetworkGateway is Istio's samples/multicluster/expose-services.yaml.
const crossNetworkGateway = `---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: cross-network-gateway
  namespace: istio-system
spec:
  selector:
    istio: eastwestgateway
  servers:
  - port:
      number: 15443
      name: tls
      protocol: TLS
    tls:
      mode: AUTO_PASSTHROUGH
    hosts:
    - "*.local"
`

// TestAutoPassthroughEastWest: network-2's east-west gateway (a router
// with ISTIO_META_NETWORK=network-2), selected by Istio's
// cross-network-gateway, gets over a real ADS stream (SotW and Delta) the
// listener 0.0.0.0_15443 with a chain for reviews' SNI
// outbound_.9080_._.reviews.default.svc.cluster.local, the SNI-DNAT
// cluster of that name without TLS, and EDS for it: its own network's two
// mTLS pods (the pod without a sidecar is left out, as istiod does) and
// network-1's pod as network-1's gateway. Everything validates.
func TestAutoPassthroughEastWest(t *testing.T) {
	dir := t.TempDir()
	const sidecar = "security.istio.io/tlsMode: istio"
	pods := reviewsPod("reviews-1", "10.10.1.1", "topology.istio.io/network: network-1, "+sidecar) +
		reviewsPod("reviews-2a", "10.10.2.1", "topology.istio.io/network: network-2, "+sidecar) +
		reviewsPod("reviews-2b", "10.10.2.2", "topology.istio.io/network: network-2, "+sidecar) +
		reviewsPod("reviews-2c", "10.10.2.3", "topology.istio.io/network: network-2, version: v1")
	xdstest.WriteFileAtomic(t, filepath.Join(dir, "reviews.yaml"), strings.Replace(twoNetworksManifests, "{{pods}}", pods, 1)+crossNetworkGateway)
	networks := meshNetworksFile(t, `networks:
  network-1:
    gateways:
    - address: 192.0.2.20
      port: 15443
`)
	srv := startWithNetworks(t, dir, networks)
	conn := bootstraptest.Dial(t, srv.GRPCListenAddr())
	const sni = "outbound_.9080_._.reviews.default.svc.cluster.local"
	want := []string{"10.10.2.1:9080/1", "10.10.2.2:9080/1", "192.0.2.20:15443/1"}
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			node := bootstraptest.SidecarNode(t, "istio-eastwestgateway-0", "istio-system", "10.10.2.50", map[string]string{"istio": "eastwestgateway"})
			node.Id = strings.Replace(node.Id, "sidecar~", "router~", 1)
			node.Metadata.Fields["NETWORK"] = structpb.NewStringValue("network-2")
			// A router without HTTP servers asks for no RDS.
			c := runClient(t, conn, adsc.Config{Node: node, Delta: delta, Types: []string{model.ClusterType, model.EndpointType, model.ListenerType}})
			for _, typ := range []string{model.ClusterType, model.EndpointType, model.ListenerType} {
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
			cds, _ := c.Decoded(model.ClusterType)
			cl, ok := cds[sni].(*clusterv3.Cluster)
			if !ok {
				t.Fatalf("no cluster %s among %v", sni, keys(cds))
			}
			if cl.GetTransportSocket() != nil || len(cl.GetTransportSocketMatches()) != 0 {
				t.Errorf("%s originates TLS", sni)
			}
			lds, _ := c.Decoded(model.ListenerType)
			l, ok := lds["0.0.0.0_15443"].(*listenerv3.Listener)
			if !ok {
				t.Fatalf("no listener 0.0.0.0_15443 among %v", keys(lds))
			}
			found := false
			for _, fc := range l.GetFilterChains() {
				found = found || slices.Equal(fc.GetFilterChainMatch().GetServerNames(), []string{sni})
			}
			if !found {
				t.Errorf("listener has no chain for SNI %s", sni)
			}
			eds, _ := c.Decoded(model.EndpointType)
			cla, ok := eds[sni].(*endpointv3.ClusterLoadAssignment)
			if !ok {
				t.Fatalf("no assignment for %s", sni)
			}
			if got := weightedEndpoints(cla); !slices.Equal(got, want) {
				t.Errorf("endpoints %v, want %v", got, want)
			}
		})
	}
}
