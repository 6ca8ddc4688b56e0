package gateway_test

import (
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// TestBackendTLSSystemVerifies: the cluster of a Service port whose
// BackendTLSPolicy has wellKnownCACertificates System (ratings, port http,
// in testdata/backendtls.yaml) verifies the server certificate against the
// proxy's OS CA bundle, agent SDS "file-root:system", as istiod's clusters
// do with VERIFY_CERTIFICATE_AT_CLIENT on (its default).
func TestBackendTLSSystemVerifies(t *testing.T) {
	mesh := nt.Bookinfo(t)
	in := readInput(t, "testdata/backendtls.yaml")
	in.Service = serviceLookup(mesh.Services)
	in.ConfigMapCA = configMapCA
	mesh.Configs = append(mesh.Configs, gateway.Translate(in).Configs...)
	got := generate(t, gatewayProxy("default", "bookinfo"), mesh.PushContext())
	const name = "outbound|9080||ratings.default.svc.cluster.local"
	for _, c := range got.clusters {
		if c.GetName() != name {
			continue
		}
		var ctx tlsv3.UpstreamTlsContext
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&ctx); err != nil {
			t.Fatalf("%s: transport socket: %v", name, err)
		}
		if ctx.GetSni() != "ratings.example.com" {
			t.Errorf("sni %q, want the policy's hostname ratings.example.com", ctx.GetSni())
		}
		sds := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig()
		if sds.GetName() != "file-root:system" || sds.GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-grpc" {
			t.Errorf("validation %v, want file-root:system from the agent (sds-grpc)", sds)
		}
		return
	}
	t.Fatalf("no cluster %s", name)
}
