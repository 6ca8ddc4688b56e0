package cluster_test

import (
	"bytes"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

const reviewsCluster = "outbound|9080||" + reviewsHost

// checkAutoMTLS asserts c has Istio's two auto-mTLS transport socket
// matches and no plain transport socket.
func checkAutoMTLS(t *testing.T, c *clusterv3.Cluster, subset string) {
	t.Helper()
	m := c.GetTransportSocketMatches()
	if len(m) != 2 {
		t.Fatalf("%s: %d transport_socket_matches, want 2", c.Name, len(m))
	}
	if c.GetTransportSocket() != nil {
		t.Errorf("%s: transport_socket set besides the matches", c.Name)
	}
	if m[0].GetName() != "tlsMode-istio" || m[0].GetMatch().GetFields()["tlsMode"].GetStringValue() != "istio" || len(m[0].GetMatch().GetFields()) != 1 {
		t.Errorf("%s: first match %s %v, want tlsMode-istio {tlsMode: istio}", c.Name, m[0].GetName(), m[0].GetMatch())
	}
	if m[0].GetTransportSocket().GetName() != "envoy.transport_sockets.tls" {
		t.Errorf("%s: tlsMode-istio socket %s", c.Name, m[0].GetTransportSocket().GetName())
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := m[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatalf("%s: tlsMode-istio: %v", c.Name, err)
	}
	// The context is spliced from a per-port prefix and the cluster's SNI:
	// its bytes must be exactly a deterministic marshal of the message.
	if b, err := (proto.MarshalOptions{Deterministic: true}).Marshal(ctx); err != nil || !bytes.Equal(b, m[0].GetTransportSocket().GetTypedConfig().GetValue()) {
		t.Errorf("%s: tlsMode-istio context bytes differ from its canonical encoding (%v)", c.Name, err)
	}
	_, _, host, _, _ := clustername.Parse(c.Name)
	if want := cluster.IstioMutualSNI(9080, subset, host); ctx.GetSni() != want {
		t.Errorf("%s: SNI %q, want %q", c.Name, ctx.GetSni(), want)
	}
	common := ctx.GetCommonTlsContext()
	if certs := common.GetTlsCertificateSdsSecretConfigs(); len(certs) != 1 || certs[0].GetName() != "default" ||
		certs[0].GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-grpc" {
		t.Errorf("%s: certificate SDS %v, want default from sds-grpc", c.Name, certs)
	}
	if root := common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); root.GetName() != "ROOTCA" {
		t.Errorf("%s: validation SDS %v, want ROOTCA", c.Name, root)
	}
	if m[1].GetName() != "tlsMode-disabled" || len(m[1].GetMatch().GetFields()) != 0 || m[1].GetMatch() == nil ||
		m[1].GetTransportSocket().GetName() != "envoy.transport_sockets.raw_buffer" {
		t.Errorf("%s: second match %v, want tlsMode-disabled {} raw_buffer", c.Name, m[1])
	}
}

func noAutoMTLS(t *testing.T, c *clusterv3.Cluster) {
	t.Helper()
	if len(c.GetTransportSocketMatches()) != 0 {
		t.Errorf("%s: transport_socket_matches %v, want none", c.Name, c.GetTransportSocketMatches())
	}
}

func TestAutoMTLSDefault(t *testing.T) {
	got := buildFor(t, bookinfoWith(t))
	checkAutoMTLS(t, must(t, got, reviewsCluster), "")
	checkAutoMTLS(t, must(t, got, "outbound|9080||"+ratingsHost), "")

	// Subset clusters of a rule without tls get it too, with the subset's SNI.
	got = buildFor(t, bookinfoWith(t, "bookinfo-networking/destination-rule-reviews.yaml"))
	checkAutoMTLS(t, must(t, got, "outbound|9080|v2|"+reviewsHost), "v2")
}

func TestAutoMTLSExplicitTLSWins(t *testing.T) {
	got := buildFor(t, bookinfoWith(t, "bookinfo-networking/destination-rule-all-mtls.yaml"))
	c := must(t, got, reviewsCluster)
	noAutoMTLS(t, c)
	if c.GetTransportSocket() == nil {
		t.Errorf("%s: ISTIO_MUTUAL rule lost its transport_socket", c.Name)
	}

	in := bookinfoWith(t)
	in.Configs = append(in.Configs, model.Config{
		Meta: model.Meta{Kind: model.KindDestinationRule, Name: "reviews", Namespace: "default"},
		Spec: &networking.DestinationRule{Host: "reviews", TrafficPolicy: &networking.TrafficPolicy{
			Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_DISABLE},
		}},
	})
	got = buildFor(t, in)
	c = must(t, got, reviewsCluster)
	noAutoMTLS(t, c)
	if c.GetTransportSocket() != nil {
		t.Errorf("%s: tls DISABLE has a transport_socket", c.Name)
	}
	// Other services keep auto-mTLS.
	checkAutoMTLS(t, must(t, got, "outbound|9080||"+ratingsHost), "")
}

func TestAutoMTLSPeerAuthenticationDisable(t *testing.T) {
	in := bookinfoWith(t)
	in.Configs = append(in.Configs, model.Config{
		Meta: model.Meta{Kind: model.KindPeerAuthentication, Name: "reviews-plain", Namespace: "default"},
		Spec: &security.PeerAuthentication{
			Selector: nil,
			Mtls:     &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_DISABLE},
		},
	})
	got := buildFor(t, in)
	noAutoMTLS(t, must(t, got, reviewsCluster))
	noAutoMTLS(t, must(t, got, "outbound|9080||"+ratingsHost))
}

func TestAutoMTLSMeshOff(t *testing.T) {
	in := bookinfoWith(t)
	in.Mesh = &meshconfig.MeshConfig{EnableAutoMtls: wrapperspb.Bool(false)}
	got := buildFor(t, in)
	for name, c := range got {
		if len(c.GetTransportSocketMatches()) != 0 {
			t.Errorf("%s: transport_socket_matches with enableAutoMtls false", name)
		}
	}
	in.Mesh = &meshconfig.MeshConfig{EnableAutoMtls: wrapperspb.Bool(true)}
	checkAutoMTLS(t, must(t, buildFor(t, in), reviewsCluster), "")
}

func TestAutoMTLSMeshExternal(t *testing.T) {
	in := bookinfoWith(t)
	for i, s := range in.Services {
		if s.Hostname == reviewsHost {
			ext := *s
			ext.MeshExternal = true
			in.Services[i] = &ext
		}
	}
	noAutoMTLS(t, must(t, buildFor(t, in), reviewsCluster))
}

// TestAutoMTLSCacheFollowsPeerAuthentication checks a cached cluster is
// rebuilt when a PeerAuthentication changes.
func TestAutoMTLSCacheFollowsPeerAuthentication(t *testing.T) {
	in := bookinfoWith(t)
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	env := in.Environment()
	proxy := nt.BookinfoProxy("productpage-v1")
	reviews := func(push *model.PushContext) *clusterv3.Cluster {
		t.Helper()
		res, err := cluster.Generator{}.Generate(proxy, push, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.GetName() == reviewsCluster {
				c := &clusterv3.Cluster{}
				if err := r.GetResource().UnmarshalTo(c); err != nil {
					t.Fatal(err)
				}
				return c
			}
		}
		t.Fatalf("no cluster %s", reviewsCluster)
		return nil
	}
	push := model.NewPushContext(env, nil, nil)
	checkAutoMTLS(t, reviews(push), "")

	next := in
	next.Configs = append(append([]model.Config(nil), in.Configs...), model.Config{
		Meta: model.Meta{Kind: model.KindPeerAuthentication, Name: "plain", Namespace: "default"},
		Spec: &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_DISABLE}},
	})
	env.ConfigStore = next.Environment().ConfigStore
	req := model.NewPushRequest(true, model.ReasonConfigUpdate,
		model.ConfigKey{Kind: model.KindPeerAuthentication, Name: "plain", Namespace: "default"})
	in.Cache.Invalidate(req)
	noAutoMTLS(t, reviews(model.NewPushContext(env, push, req)))
}
