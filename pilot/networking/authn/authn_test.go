package authn_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// loadConfigs reads testdata/NAME through the file config source.
func loadConfigs(t *testing.T, name string) []model.Config {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := file.NewLoader(dir, nil).Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Errors {
		t.Fatalf("%s: %v", name, e)
	}
	return snap.Configs
}

func TestWorkloadPolicy(t *testing.T) {
	configs := loadConfigs(t, "peer-authentication.yaml")
	// portLevelMtls without a selector: a cluster, and so the file source,
	// refuses it; given anyway, the generator ignores it with a warning.
	for i, c := range configs {
		if c.Namespace == "legacy" && c.Name == "legacy" {
			pa := proto.Clone(c.Spec).(*security.PeerAuthentication)
			pa.PortLevelMtls = map[uint32]*security.PeerAuthentication_MutualTLS{8080: {Mode: security.PeerAuthentication_MutualTLS_STRICT}}
			configs[i].Spec = pa
		}
	}
	push := nt.Input{Configs: configs}.PushContext()
	cases := []struct {
		name   string
		ns     string
		labels map[string]string
		port   uint32
		want   authn.Mode
	}{
		{"namespace STRICT", "default", map[string]string{"app": "ratings"}, 9080, authn.ModeStrict},
		{"workload PERMISSIVE overrides namespace", "default", map[string]string{"app": "productpage"}, 9443, authn.ModePermissive},
		{"port-level DISABLE", "default", map[string]string{"app": "productpage"}, 9080, authn.ModeDisable},
		{"workload UNSET inherits namespace STRICT", "default", map[string]string{"app": "reviews"}, 9080, authn.ModeStrict},
		{"port-level PERMISSIVE under inherited STRICT", "default", map[string]string{"app": "reviews"}, 9081, authn.ModePermissive},
		{"mesh PERMISSIVE", "other", nil, 80, authn.ModePermissive},
		{"namespace DISABLE", "legacy", nil, 80, authn.ModeDisable},
		{"portLevelMtls without selector ignored", "legacy", nil, 8080, authn.ModeDisable},
	}
	for _, c := range cases {
		if got := authn.EffectiveMode(push, c.ns, c.labels, c.port); got != c.want {
			t.Errorf("%s: %s/%v port %d: %s, want %s", c.name, c.ns, c.labels, c.port, got, c.want)
		}
	}
	p := authn.WorkloadPolicy(push.SecurityPolicies(), "legacy", nil)
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "PeerAuthentication legacy/legacy: spec.portLevelMtls") {
		t.Errorf("warnings %q, want one naming spec.portLevelMtls of legacy/legacy", p.Warnings)
	}
	svc := nt.KubeService("productpage", "default", "10.0.0.1", model.Port{Name: "http", Port: 9080})
	if got := authn.ServiceMode(push, svc, 9080); got != authn.ModeDisable {
		t.Errorf("ServiceMode(productpage, 9080) = %s, want DISABLE", got)
	}
	svc.MeshExternal = true
	if got := authn.ServiceMode(push, svc, 9443); got != authn.ModeDisable {
		t.Errorf("ServiceMode(mesh-external) = %s, want DISABLE", got)
	}
}

func TestDefaultsAndPrecedence(t *testing.T) {
	if got := authn.EffectiveMode(nt.Input{}.PushContext(), "default", nil, 80); got != authn.ModePermissive {
		t.Errorf("no policy: %s, want PERMISSIVE (Istio's default)", got)
	}
	pa := func(name string, created time.Time, sel map[string]string, mode security.PeerAuthentication_MutualTLS_Mode) model.Config {
		spec := &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: mode}}
		if sel != nil {
			spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
		}
		return model.Config{Meta: model.Meta{Kind: model.KindPeerAuthentication, Name: name, Namespace: "ns", CreationTimestamp: created}, Spec: spec}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	push := nt.Input{Configs: []model.Config{
		pa("a-newer", t0.Add(time.Hour), nil, security.PeerAuthentication_MutualTLS_DISABLE),
		pa("z-older", t0, nil, security.PeerAuthentication_MutualTLS_STRICT),
		pa("w-newer", t0.Add(time.Hour), map[string]string{"app": "x"}, security.PeerAuthentication_MutualTLS_PERMISSIVE),
		pa("w-older", t0, map[string]string{"app": "x"}, security.PeerAuthentication_MutualTLS_DISABLE),
	}}.PushContext()
	if got := authn.EffectiveMode(push, "ns", nil, 80); got != authn.ModeStrict {
		t.Errorf("two namespace policies: %s, want the oldest's STRICT", got)
	}
	if got := authn.EffectiveMode(push, "ns", map[string]string{"app": "x", "v": "1"}, 80); got != authn.ModeDisable {
		t.Errorf("two workload policies: %s, want the oldest's DISABLE", got)
	}
}

func TestVariantsAndTLSContext(t *testing.T) {
	strict := authn.Variants(authn.ModeStrict)
	if len(strict) != 2 || !strict[0].TLS || strict[0].TransportProtocol != "tls" || !strict[1].Reject || strict[1].TransportProtocol != "raw_buffer" {
		t.Errorf("STRICT variants %+v", strict)
	}
	perm := authn.Variants(authn.ModePermissive)
	if len(perm) != 2 || !perm[0].TLS || !slices.Contains(perm[0].ApplicationProtocols, "istio-peer-exchange") || perm[1].TLS || perm[1].Reject {
		t.Errorf("PERMISSIVE variants %+v", perm)
	}
	if d := authn.Variants(authn.ModeDisable); len(d) != 1 || d[0].TLS || d[0].TransportProtocol != "" {
		t.Errorf("DISABLE variants %+v", d)
	}
	ts, err := authn.ServerTransportSocket()
	if err != nil {
		t.Fatal(err)
	}
	nt.ValidateRecursively(t, ts)
	var ctx tlsv3.DownstreamTlsContext
	if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		t.Fatal(err)
	}
	common := ctx.GetCommonTlsContext()
	certs := common.GetTlsCertificateSdsSecretConfigs()
	root := common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig()
	if !ctx.GetRequireClientCertificate().GetValue() || len(certs) != 1 || certs[0].GetName() != "default" || root.GetName() != "ROOTCA" ||
		certs[0].GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-grpc" ||
		root.GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-grpc" ||
		!slices.Equal(common.GetAlpnProtocols(), []string{"h2", "http/1.1"}) {
		t.Errorf("DownstreamTlsContext %v", &ctx)
	}
}
