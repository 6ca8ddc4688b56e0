package cluster_test

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// buildVerify builds and validates the clusters of the productpage-v1
// sidecar with VERIFY_CERTIFICATE_AT_CLIENT set to verify.
func buildVerify(t *testing.T, in nt.Input, verify bool) map[string]*clusterv3.Cluster {
	t.Helper()
	env := in.Environment()
	env.SkipVerifyCertAtClient = !verify
	clusters, err := cluster.Build(nt.BookinfoProxy("productpage-v1"), model.NewPushContext(env, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*clusterv3.Cluster{}
	for _, c := range clusters {
		nt.ValidateRecursively(t, c)
		out[c.Name] = c
	}
	return out
}

// TestVerifyCertAtClient checks which root, if any, TLS origination
// validates the server with, as istiod does with VERIFY_CERTIFICATE_AT_CLIENT
// on and off: an empty caCertificates is the OS bundle ("file-root:system")
// when on, unless insecureSkipVerify or a credentialName says otherwise.
func TestVerifyCertAtClient(t *testing.T) {
	const mutualCert = "file-cert:/etc/certs/client.pem~/etc/certs/key.pem"
	cases := []struct {
		name   string
		tls    *networking.ClientTLSSettings
		verify bool
		// root is the validation context's SDS secret; "" for none.
		root string
		// ads: root comes from the control plane, else from the agent.
		ads bool
		// autoSAN is auto_san_validation.
		autoSAN bool
		// cert is the client certificate's SDS secret; "" for none.
		cert string
	}{
		{name: "simple, on", tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE},
			verify: true, root: "file-root:system", autoSAN: true},
		{name: "simple, off", tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE}},
		{name: "simple, insecureSkipVerify", verify: true, tls: &networking.ClientTLSSettings{
			Mode: networking.ClientTLSSettings_SIMPLE, InsecureSkipVerify: wrapperspb.Bool(true)}},
		{name: "simple, credentialName", verify: true, tls: &networking.ClientTLSSettings{
			Mode: networking.ClientTLSSettings_SIMPLE, CredentialName: "cred"}, root: "kubernetes://cred-cacert", ads: true, autoSAN: true},
		{name: "simple, credentialName, off", tls: &networking.ClientTLSSettings{
			Mode: networking.ClientTLSSettings_SIMPLE, CredentialName: "cred"}, root: "kubernetes://cred-cacert", ads: true},
		{name: "simple, explicit CA", verify: true, tls: &networking.ClientTLSSettings{
			Mode: networking.ClientTLSSettings_SIMPLE, CaCertificates: "/etc/certs/ca.pem"}, root: "file-root:/etc/certs/ca.pem", autoSAN: true},
		{name: "simple, explicit CA, off", tls: &networking.ClientTLSSettings{
			Mode: networking.ClientTLSSettings_SIMPLE, CaCertificates: "/etc/certs/ca.pem"}, root: "file-root:/etc/certs/ca.pem"},
		{name: "simple, system, off", tls: &networking.ClientTLSSettings{
			Mode: networking.ClientTLSSettings_SIMPLE, CaCertificates: "system"}, root: "file-root:system"},
		{name: "mutual, on", verify: true, tls: &networking.ClientTLSSettings{
			Mode: networking.ClientTLSSettings_MUTUAL, ClientCertificate: "/etc/certs/client.pem", PrivateKey: "/etc/certs/key.pem"},
			root: "file-root:system", autoSAN: true, cert: mutualCert},
		{name: "mutual, off", tls: &networking.ClientTLSSettings{
			Mode: networking.ClientTLSSettings_MUTUAL, ClientCertificate: "/etc/certs/client.pem", PrivateKey: "/etc/certs/key.pem"},
			cert: mutualCert},
		{name: "mutual, insecureSkipVerify", verify: true, tls: &networking.ClientTLSSettings{
			Mode: networking.ClientTLSSettings_MUTUAL, ClientCertificate: "/etc/certs/client.pem", PrivateKey: "/etc/certs/key.pem",
			InsecureSkipVerify: wrapperspb.Bool(true)}, cert: mutualCert},
		{name: "istio mutual, off", tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL},
			root: "ROOTCA", cert: "default"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := withRule(t, &networking.TrafficPolicy{Tls: tc.tls})
			c := must(t, buildVerify(t, in, tc.verify), reviewsCluster)
			common := upstreamTLS(t, c).GetCommonTlsContext()
			cv := common.GetCombinedValidationContext()
			switch {
			case tc.root == "" && common.GetValidationContextType() != nil:
				t.Errorf("validation context %v, want none", common.GetValidationContextType())
			case tc.root != "" && tc.ads:
				if s := cv.GetValidationContextSdsSecretConfig(); s.GetName() != tc.root || s.GetSdsConfig().GetAds() == nil {
					t.Errorf("validation sds %v, want %s over ADS", s, tc.root)
				}
			case tc.root != "":
				checkAgentSDS(t, "validation", cv.GetValidationContextSdsSecretConfig(), tc.root)
			}
			var certs []string
			for _, s := range common.GetTlsCertificateSdsSecretConfigs() {
				certs = append(certs, s.GetName())
			}
			if want := []string{tc.cert}; (tc.cert == "" && len(certs) != 0) || (tc.cert != "" && !slices.Equal(certs, want)) {
				t.Errorf("client certificates %v, want %q", certs, tc.cert)
			}
			if tc.tls.GetMode() == networking.ClientTLSSettings_ISTIO_MUTUAL {
				return
			}
			up := httpOptions(t, c).GetUpstreamHttpProtocolOptions()
			if !up.GetAutoSni() || up.GetAutoSanValidation() != tc.autoSAN {
				t.Errorf("upstream http options %v, want auto_sni and auto_san_validation %v", up, tc.autoSAN)
			}
		})
	}
}

// TestVerifyCertAtClientKeepsSANs checks that the OS bundle is combined
// with the rule's subjectAltNames (and auto_san_validation then stays off,
// as in Istio) and its caCrl.
func TestVerifyCertAtClientKeepsSANs(t *testing.T) {
	in, dr := withRule(t, &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{
		Mode: networking.ClientTLSSettings_SIMPLE, SubjectAltNames: []string{"reviews.example.com"}, CaCrl: "/etc/certs/crl.pem",
	}})
	noWarning(t, dr, "caCrl")
	c := must(t, buildVerify(t, in, true), reviewsCluster)
	cv := upstreamTLS(t, c).GetCommonTlsContext().GetCombinedValidationContext()
	checkAgentSDS(t, "validation", cv.GetValidationContextSdsSecretConfig(), "file-root:"+cluster.SystemCACertificates)
	if s := sans(cv.GetDefaultValidationContext()); !slices.Equal(s, []string{"reviews.example.com"}) {
		t.Errorf("SANs %v, want reviews.example.com", s)
	}
	if f := cv.GetDefaultValidationContext().GetCrl().GetFilename(); f != "/etc/certs/crl.pem" {
		t.Errorf("crl %q, want /etc/certs/crl.pem", f)
	}
	if up := httpOptions(t, c).GetUpstreamHttpProtocolOptions(); !up.GetAutoSni() || up.GetAutoSanValidation() {
		t.Errorf("upstream http options %v, want auto_sni only", up)
	}
}

// TestCaCrlSkipVerifyWarns: with insecureSkipVerify there is no validation
// context to carry the CRL, and the rule's warnings say so.
func TestCaCrlSkipVerifyWarns(t *testing.T) {
	_, dr := withRule(t, &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{
		Mode: networking.ClientTLSSettings_SIMPLE, CaCrl: "/etc/certs/crl.pem", InsecureSkipVerify: wrapperspb.Bool(true),
	}})
	w := cluster.Warnings(dr)
	if len(w) != 1 || !strings.Contains(w[0], "trafficPolicy.tls.caCrl: needs server certificate verification") {
		t.Errorf("warnings %q, want one on tls.caCrl", w)
	}
}
