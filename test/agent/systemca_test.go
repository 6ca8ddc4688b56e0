package agent_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/pilot/agent/sds"
	"github.com/meshpilot/meshpilot/pilot/agent/sds/sdstest"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// externalTLS is an external host the sidecar originates TLS to with a
// DestinationRule naming no CA.
const externalTLS = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: example-api, namespace: default}
spec:
  hosts: [api.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
  location: MESH_EXTERNAL
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: example-api, namespace: default}
spec:
  host: api.example.com
  trafficPolicy: {tls: {mode: SIMPLE}}
`

// TestSystemCAThroughAgent: with VERIFY_CERTIFICATE_AT_CLIENT at its
// default, the control plane's cluster for a SIMPLE DestinationRule
// without caCertificates validates with agent SDS "file-root:system", and
// the real pilot-agent serves that name as this host's OS CA bundle.
func TestSystemCAThroughAgent(t *testing.T) {
	var osBundle []byte
	for _, p := range sds.OSRootPaths() {
		if b, err := os.ReadFile(p); err == nil {
			osBundle = b
			break
		}
	}
	if osBundle == nil {
		t.Skip("no OS CA bundle on this host")
	}
	configDir := t.TempDir()
	src := filepath.Join(fixtures.RepoRoot(t), "examples/bookinfo")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".yaml" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, configDir, e.Name(), string(b))
	}
	writeFile(t, configDir, "external-tls.yaml", externalTLS)

	srv := bootstraptest.Start(t, controlPlaneOptions(t, configDir, ""))
	dir := podDir(t, srv)
	vars, _, _ := sidecarEnv(t, srv.SecureGRPCListenAddr(), build(t, "pilot/agent/envoy/fakeenvoy"), nil)
	startAgent(t, dir, vars, "sidecar", "--domain", vars["POD_NAMESPACE"]+".svc.cluster.local")

	client, _ := envoyClient(t, dir)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const name = "outbound|80||api.example.com"
	if err := client.WaitFor(ctx, hasCluster(name)); err != nil {
		t.Fatalf("cluster %s through the agent: %v", name, err)
	}
	var c clusterv3.Cluster
	if err := client.Resources("type.googleapis.com/envoy.config.cluster.v3.Cluster")[name].UnmarshalTo(&c); err != nil {
		t.Fatal(err)
	}
	var up tlsv3.UpstreamTlsContext
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up); err != nil {
		t.Fatalf("%s: transport socket: %v", name, err)
	}
	root := up.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig()
	if root.GetName() != sds.SystemRootName {
		t.Fatalf("%s validates with %v, want SDS %s", name, root, sds.SystemRootName)
	}

	// What Envoy would then ask the agent for.
	sdsClient := sdstest.Dial(t, filepath.Join(dir, sdsSocket), true, bootstrapNode(t, filepath.Join(dir, envoyBoot)), root.GetName())
	if err := sdsClient.WaitFor(ctx, func(c *sdstest.Client) bool { return c.Latest(sds.SystemRootName) != nil }); err != nil {
		t.Fatalf("SDS %s: %v (stream error %v)", sds.SystemRootName, err, sdsClient.Err())
	}
	s := sdsClient.Latest(sds.SystemRootName)
	if err := s.ValidateAll(); err != nil || !bytes.Equal(s.GetValidationContext().GetTrustedCa().GetInlineBytes(), osBundle) {
		t.Fatalf("SDS %s (validate: %v) is not this host's OS CA bundle", sds.SystemRootName, err)
	}
}
