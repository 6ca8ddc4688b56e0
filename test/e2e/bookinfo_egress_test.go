package e2e

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestBookinfoEgressGoogleAPIs serves Istio's egress-rule-google-apis.yaml
// (a DNS ServiceEntry, a VirtualService sending port 80 to 443, and a
// DestinationRule originating TLS on 443) and checks the Envoy fields that
// carry its meaning, as productpage's sidecar receives them.
func TestBookinfoEgressGoogleAPIs(t *testing.T) {
	srv, snap := startBookinfo(t)
	conn := bootstraptest.Dial(t, srv.GRPCListenAddr())
	var node *corev3.Node
	for _, pod := range snap.Kube.Pods {
		if pod.Name == "productpage-v1" {
			node = bootstraptest.SidecarNode(t, pod.Name, pod.Namespace, pod.Status.PodIP, pod.Labels)
		}
	}
	if node == nil {
		t.Fatal("no productpage-v1 pod in examples/bookinfo")
	}
	c := runClient(t, conn, adsc.Config{Node: node, Delta: true})
	decoded, err := c.Decoded(model.ClusterType)
	if err != nil {
		t.Fatal(err)
	}
	const host = "www.googleapis.com"
	get := func(name string) *clusterv3.Cluster {
		t.Helper()
		cl, ok := decoded[name].(*clusterv3.Cluster)
		if !ok {
			t.Fatalf("no cluster %s", name)
		}
		if err := networkingtest.Validate(cl); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		return cl
	}

	https := get("outbound|443||" + host)
	// Istio's DestinationRule reference: "Traffic settings specified at the
	// destination-level will not be inherited when overridden by
	// port-level settings": the 443 entry sets only tls, so its load
	// balancer is the default (LEAST_REQUEST), not the rule's ROUND_ROBIN.
	if https.GetType() != clusterv3.Cluster_STRICT_DNS || https.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST {
		t.Errorf("443: type %v lb %v, want STRICT_DNS (resolution DNS) LEAST_REQUEST (port-level settings do not inherit)", https.GetType(), https.GetLbPolicy())
	}
	if got := https.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress(); got.GetAddress() != host || got.GetPortValue() != 443 {
		t.Errorf("443: resolves %v, want %s:443", got, host)
	}
	ts := https.GetTransportSocket()
	if ts.GetName() != "envoy.transport_sockets.tls" || len(https.GetTransportSocketMatches()) != 0 {
		t.Fatalf("443: transport socket %v, matches %d: want TLS origination (portLevelSettings tls SIMPLE) and no auto-mTLS", ts, len(https.GetTransportSocketMatches()))
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	if certs := ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs(); len(certs) != 0 {
		t.Errorf("443: SIMPLE TLS presents a client certificate %v", certs)
	}

	// No sni in the rule: Istio's auto SNI from the request's host, with
	// the server certificate checked against it.
	var opts httpv3.HttpProtocolOptions
	if err := https.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&opts); err != nil {
		t.Fatalf("443: http protocol options: %v", err)
	}
	if u := opts.GetUpstreamHttpProtocolOptions(); !u.GetAutoSni() || !u.GetAutoSanValidation() || ctx.GetSni() != "" {
		t.Errorf("443: upstream http options %v, sni %q: want auto_sni and auto_san_validation, no fixed SNI", u, ctx.GetSni())
	}

	plain := get("outbound|80||" + host)
	if plain.GetTransportSocket() != nil || len(plain.GetTransportSocketMatches()) != 0 {
		t.Errorf("80: TLS on the plaintext port (the rule's tls is for port 443 only): %v", plain.GetTransportSocket())
	}
	if plain.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
		t.Errorf("80: lb %v, want ROUND_ROBIN from the rule's top-level policy", plain.GetLbPolicy())
	}

	routes, err := c.Decoded(model.RouteType)
	if err != nil {
		t.Fatal(err)
	}
	rc, ok := routes["80"].(*routev3.RouteConfiguration)
	if !ok {
		t.Fatalf("no route configuration 80: %v", keys(routes))
	}
	var vh *routev3.VirtualHost
	for _, v := range rc.GetVirtualHosts() {
		if v.GetName() == host+":80" {
			vh = v
		}
	}
	if vh == nil {
		t.Fatalf("route 80 has no virtual host %s:80", host)
	}
	if got := vh.GetRoutes()[0].GetRoute().GetCluster(); got != "outbound|443||"+host {
		t.Errorf("port 80 traffic goes to %q, want outbound|443||%s (the VirtualService's port rewrite)", got, host)
	}
}
