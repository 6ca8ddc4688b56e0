package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// twoNetworksManifests: Service reviews and network-2's east-west gateway Service (labelled with its
// network, external IP 192.0.2.10, port 15443) as Istio's
// samples/multicluster/gen-eastwest-gateway.sh makes it.
const twoNetworksManifests = `apiVersion: v1
kind: Service
metadata:
  name: reviews
  namespace: default
spec:
  clusterIP: 10.96.10.13
  ports:
  - port: 9080
    name: http
  selector:
    app: reviews
---
apiVersion: v1
kind: Service
metadata:
  name: istio-eastwestgateway
  namespace: istio-system
  labels:
    topology.istio.io/network: network-2
spec:
  type: LoadBalancer
  clusterIP: 10.96.99.1
  externalIPs:
  - 192.0.2.10
  ports:
  - port: 15443
    name: tls
  selector:
    istio: eastwestgateway
` + `{{pods}}`

// reviewsPod is a ready reviews pod at ip with labels (YAML flow map
// entries).
func reviewsPod(name, ip, labels string) string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
  labels: {app: reviews, %s}
spec:
  serviceAccountName: reviews
  containers:
  - name: reviews
    ports:
    - containerPort: 9080
status:
  phase: Running
  podIP: %s
  conditions:
  - type: Ready
    status: "True"
`, name, labels, ip)
}

// meshNetworksFile writes meshNetworks YAML to a file outside the config
// directory and returns its path.
func meshNetworksFile(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "meshNetworks")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startWithNetworks serves dir with the meshNetworks file networks.
func startWithNetworks(t *testing.T, dir, networks string) *bootstrap.Server {
	t.Helper()
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.NetworksConfigFile = networks
	return bootstraptest.Start(t, opts)
}

// TestTwoNetworksEDS is the acceptance test of split-horizon EDS with a
// real ADS client (SotW and Delta). reviews has one pod on network-1 and
// three on network-2: two labelled, with a sidecar, and one without either
// whose network comes from meshNetworks fromCidr. A sidecar on network-1
// gets network-1's endpoint directly and network-2's two mTLS endpoints as
// the east-west gateway's address (from the gateway Service) weighing 2;
// the endpoint without a sidecar is dropped. A sidecar on network-2 gets
// its network's three endpoints and network-1's as network-1's gateway
// (a meshNetworks address). Every resource passes ValidateAll.
func TestTwoNetworksEDS(t *testing.T) {
	dir := t.TempDir()
	const sidecar = "security.istio.io/tlsMode: istio"
	pods := reviewsPod("reviews-1", "10.10.1.1", "topology.istio.io/network: network-1, "+sidecar) +
		reviewsPod("reviews-2a", "10.10.2.1", "topology.istio.io/network: network-2, "+sidecar) +
		reviewsPod("reviews-2b", "10.10.2.2", "topology.istio.io/network: network-2, "+sidecar) +
		reviewsPod("reviews-2c", "10.10.2.3", "version: v1")
	xdstest.WriteFileAtomic(t, filepath.Join(dir, "reviews.yaml"), strings.Replace(twoNetworksManifests, "{{pods}}", pods, 1))
	networks := meshNetworksFile(t, `networks:
  network-1:
    gateways:
    - address: 192.0.2.20
      port: 15443
  network-2:
    endpoints:
    - fromCidr: 10.10.2.0/24
`)
	srv := startWithNetworks(t, dir, networks)
	conn := bootstraptest.Dial(t, srv.GRPCListenAddr())
	const cluster = "outbound|9080||reviews.default.svc.cluster.local"
	cases := []struct {
		network string
		want    []string
	}{
		{"network-1", []string{"10.10.1.1:9080/1", "192.0.2.10:15443/2"}},
		{"network-2", []string{"10.10.2.1:9080/1", "10.10.2.2:9080/1", "10.10.2.3:9080/1", "192.0.2.20:15443/1"}},
	}
	for _, tc := range cases {
		for _, delta := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/delta=%v", tc.network, delta), func(t *testing.T) {
				node := bootstraptest.SidecarNode(t, "client", "default", "10.10.9.9", map[string]string{"app": "client"})
				node.Metadata.Fields["NETWORK"] = structpb.NewStringValue(tc.network)
				c := runClient(t, conn, adsc.Config{Node: node, Delta: delta})
				for _, typ := range []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType} {
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
				eds, err := c.Decoded(model.EndpointType)
				if err != nil {
					t.Fatal(err)
				}
				cla, ok := eds[cluster].(*endpointv3.ClusterLoadAssignment)
				if !ok {
					t.Fatalf("no assignment for %s", cluster)
				}
				if got := weightedEndpoints(cla); !slices.Equal(got, tc.want) {
					t.Errorf("endpoints %v, want %v", got, tc.want)
				}
			})
		}
	}
}

// weightedEndpoints renders an assignment's endpoints as
// "address:port/weight", sorted.
func weightedEndpoints(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, g := range cla.GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d/%d", a.GetAddress(), a.GetPortValue(), e.GetLoadBalancingWeight().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}

// multiNetworkEcho is the echo ServiceEntry (MESH_INTERNAL, STATIC) with a
// local endpoint on network-1 at localPort (when non-zero) and a remote one
// on network-2 that nothing serves (10.255.0.1, reachable only through the
// gateway), and a DestinationRule preferring the client's network
// (failoverPriority on topology.istio.io/network, with outlier detection).
func multiNetworkEcho(localPort int) string {
	var eps strings.Builder
	if localPort != 0 {
		fmt.Fprintf(&eps, "  - address: 127.0.0.1\n    network: network-1\n    ports:\n      grpc: %d\n    labels:\n      app: echo\n", localPort)
	}
	eps.WriteString("  - address: 10.255.0.1\n    network: network-2\n    ports:\n      grpc: 7070\n    labels:\n      app: echo\n      security.istio.io/tlsMode: istio\n")
	se := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: echo
  namespace: %s
spec:
  hosts:
  - %s
  location: MESH_INTERNAL
  ports:
  - number: 7070
    name: grpc
    protocol: GRPC
  resolution: STATIC
  endpoints:
%s`, xdstest.Namespace, xdstest.Host("echo"), eps.String())
	dr := xdstest.DestinationRule("echo", `trafficPolicy:
  outlierDetection:
    consecutive5xxErrors: 5
    interval: 10s
    baseEjectionTime: 30s
  loadBalancer:
    localityLbSetting:
      enabled: true
      failoverPriority:
      - topology.istio.io/network
`)
	return xdstest.Docs(se, dr)
}

// dialOnNetwork opens an xds:/// channel to xdstest.EchoTarget for a
// proxyless client in namespace test on network nw (ISTIO_META_NETWORK).
func dialOnNetwork(t *testing.T, addr, nw string) xdstest.Client {
	t.Helper()
	return xdstest.DialBootstrap(t, xdstest.BootstrapNode(t, addr, map[string]any{
		"id":       "sidecar~127.0.0.1~client.test~test.svc.cluster.local",
		"metadata": map[string]any{"GENERATOR": "grpc", "NAMESPACE": "test", "NETWORK": nw},
	}), xdstest.EchoTarget)
}

// TestGRPCTwoNetworks is the acceptance test of split-horizon EDS for
// proxyless gRPC: a grpc-go client on network-1 sends every RPC to its
// network's backend (network-2's endpoint comes as network-2's gateway, at
// a lower failoverPriority level), and once the local backend is removed
// from the registry, through the gateway address: a real gRPC server
// standing in for the east-west gateway.
func TestGRPCTwoNetworks(t *testing.T) {
	localPort := xdstest.StartBackend(t, "local")
	gatewayPort := xdstest.StartBackend(t, "gateway")
	dir := t.TempDir()
	path := filepath.Join(dir, echoFile)
	xdstest.WriteFileAtomic(t, path, multiNetworkEcho(localPort))
	networks := meshNetworksFile(t, fmt.Sprintf(`networks:
  network-2:
    endpoints:
    - fromCidr: 10.255.0.0/16
    gateways:
    - address: 127.0.0.1
      port: %d
`, gatewayPort))
	srv := startWithNetworks(t, dir, networks)
	client := dialOnNetwork(t, srv.GRPCListenAddr(), "network-1")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Round robin over both would alternate: 50 in a row from local means
	// the gateway is at a lower priority.
	if counts := xdstest.CountBackends(t, ctx, client, 50); counts["local"] != 50 {
		t.Fatalf("with the local backend: answers %v, want all 50 from local", counts)
	}
	xdstest.WriteFileAtomic(t, path, multiNetworkEcho(0))
	// An RPC cut off while the client switches priorities restarts the streak.
	if err := untilFailedOver(ctx, client, "gateway", 50, 30*time.Second); err != nil {
		t.Fatalf("after removing the local backend: %v", err)
	}
}

// TestHostnameGateway: an east-west gateway whose address is a host name
// (as a cloud load balancer's often is) is resolved in the control plane,
// as istiod's RESOLVE_HOSTNAME_GATEWAYS: network-1's gateway is
// "localhost" in meshNetworks, and a sidecar on network-2 gets network-1's
// endpoint as 127.0.0.1:15443, the name's address from the system
// resolver, once resolution asked for the push.
func TestHostnameGateway(t *testing.T) {
	dir := t.TempDir()
	const sidecar = "security.istio.io/tlsMode: istio"
	pods := reviewsPod("reviews-1", "10.10.1.1", "topology.istio.io/network: network-1, "+sidecar) +
		reviewsPod("reviews-2a", "10.10.2.1", "topology.istio.io/network: network-2, "+sidecar)
	xdstest.WriteFileAtomic(t, filepath.Join(dir, "reviews.yaml"), strings.Replace(twoNetworksManifests, "{{pods}}", pods, 1))
	networks := meshNetworksFile(t, `networks:
  network-1:
    gateways:
    - address: localhost
      port: 15443
`)
	srv := startWithNetworks(t, dir, networks)
	node := bootstraptest.SidecarNode(t, "client", "default", "10.10.9.9", map[string]string{"app": "client"})
	node.Metadata.Fields["NETWORK"] = structpb.NewStringValue("network-2")
	c := runClient(t, bootstraptest.Dial(t, srv.GRPCListenAddr()), adsc.Config{Node: node})
	const cluster = "outbound|9080||reviews.default.svc.cluster.local"
	bootstraptest.WaitClient(t, c, "network-1's endpoint through the resolved gateway", func(c *adsc.Client) bool {
		eds, err := c.Decoded(model.EndpointType)
		if err != nil {
			t.Fatal(err)
		}
		cla, ok := eds[cluster].(*endpointv3.ClusterLoadAssignment)
		return ok && slices.Contains(weightedEndpoints(cla), "127.0.0.1:15443/1") && slices.Contains(weightedEndpoints(cla), "10.10.2.1:9080/1")
	})
	eds, _ := c.Decoded(model.EndpointType)
	cla := eds[cluster].(*endpointv3.ClusterLoadAssignment)
	if err := networkingtest.Validate(cla); err != nil {
		t.Fatal(err)
	}
	for _, e := range weightedEndpoints(cla) {
		if strings.HasPrefix(e, "10.10.1.1:") || strings.HasPrefix(e, "localhost") {
			t.Fatalf("endpoints %v: network-1's endpoint must come through its gateway's resolved address", weightedEndpoints(cla))
		}
	}
}
