package gateway_test

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

func sdsNames(cfgs []*tlsv3.SdsSecretConfig) []string {
	var out []string
	for _, c := range cfgs {
		out = append(out, c.GetName())
	}
	return out
}

// TestServerTLSFields checks the Envoy fields of credentialNames,
// caCertCredentialName, caCrl, insecureSkipVerify, tlsCertificates and a
// cross-namespace credentialName (testdata/https-tls-fields.yaml).
func TestServerTLSFields(t *testing.T) {
	ls, _ := build(t, bookinfoWith(t, mustAbs(t, "testdata/https-tls-fields.yaml")))

	two := downstream(t, listenerNamed(t, ls, "0.0.0.0_8443").GetFilterChains()[0])
	common := two.GetCommonTlsContext()
	if got := sdsNames(common.GetTlsCertificateSdsSecretConfigs()); !slices.Equal(got, []string{"kubernetes://rsa-cert", "kubernetes://ecdsa-cert"}) {
		t.Errorf("credentialNames: certificates from %v", got)
	}
	for _, c := range common.GetTlsCertificateSdsSecretConfigs() {
		if c.GetSdsConfig().GetAds() == nil {
			t.Errorf("%s not fetched over ADS", c.GetName())
		}
	}
	cv := common.GetCombinedValidationContext()
	if got := cv.GetValidationContextSdsSecretConfig().GetName(); got != "kubernetes://client-ca-cacert" {
		t.Errorf("caCertCredentialName: clients verified against %q, want kubernetes://client-ca-cacert", got)
	}
	dv := cv.GetDefaultValidationContext()
	if dv.GetCrl().GetFilename() != "/etc/crl/ca.crl" {
		t.Errorf("caCrl: crl %v", dv.GetCrl())
	}
	if dv.GetTrustChainVerification() != tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED {
		t.Errorf("insecureSkipVerify: trust chain verification %v", dv.GetTrustChainVerification())
	}
	if !two.GetRequireClientCertificate().GetValue() {
		t.Error("MUTUAL does not require a client certificate")
	}

	pairs := downstream(t, listenerNamed(t, ls, "0.0.0.0_9443").GetFilterChains()[0])
	var files []string
	for _, c := range pairs.GetCommonTlsContext().GetTlsCertificates() {
		files = append(files, c.GetCertificateChain().GetFilename()+"+"+c.GetPrivateKey().GetFilename())
	}
	if !slices.Equal(files, []string{"/etc/rsa/tls.crt+/etc/rsa/tls.key", "/etc/ecdsa/tls.crt+/etc/ecdsa/tls.key"}) {
		t.Errorf("tlsCertificates: %v", files)
	}
	vc := pairs.GetCommonTlsContext().GetValidationContext()
	if vc.GetTrustedCa().GetFilename() != "/etc/rsa/ca.crt" {
		t.Errorf("tlsCertificates: trusted CA %v, want the first pair's caCertificates", vc.GetTrustedCa())
	}
	if vc.GetTrustChainVerification() != tlsv3.CertificateValidationContext_VERIFY_TRUST_CHAIN || vc.GetCrl() != nil {
		t.Errorf("insecureSkipVerify or caCrl set without being asked: %v", vc)
	}
	if pairs.GetRequireClientCertificate().GetValue() {
		t.Error("OPTIONAL_MUTUAL requires a client certificate")
	}

	cross := downstream(t, listenerNamed(t, ls, "0.0.0.0_10443").GetFilterChains()[0])
	if got := sdsNames(cross.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()); !slices.Equal(got, []string{"kubernetes://certs/shared-cert"}) {
		t.Errorf("credentialName certs/shared-cert: certificates from %v", got)
	}
}

// TestServerTLSInvalid: a server whose tls fields contradict each other
// is not served, and the warning names the field.
func TestServerTLSInvalid(t *testing.T) {
	creds := func(names ...string) *networking.ServerTLSSettings {
		return &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialNames: names}
	}
	pair := &networking.ServerTLSSettings_TLSCertificate{ServerCertificate: "/c", PrivateKey: "/k"}
	cases := []struct {
		name string
		tls  *networking.ServerTLSSettings
		want string
	}{
		{"credentialName and credentialNames", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE,
			CredentialName: "a", CredentialNames: []string{"b"}}, "tls.credentialNames: set together with tls.credentialName"},
		{"three credentialNames", creds("a", "b", "c"), "tls.credentialNames: 3 names, at most 2"},
		{"empty credentialNames entry", creds("a", ""), "tls.credentialNames[1]: empty"},
		{"credentials and files", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE,
			CredentialNames: []string{"a"}, TlsCertificates: []*networking.ServerTLSSettings_TLSCertificate{pair}}, "credentialName(s) set together with certificate files"},
		{"three tlsCertificates", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE,
			TlsCertificates: []*networking.ServerTLSSettings_TLSCertificate{pair, pair, pair}}, "tls.tlsCertificates: 3 entries, at most 2"},
		{"tlsCertificates without a key", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE,
			TlsCertificates: []*networking.ServerTLSSettings_TLSCertificate{{ServerCertificate: "/c"}}}, "tls.tlsCertificates[0]: needs serverCertificate and privateKey"},
		{"mutual file pairs without a CA", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_MUTUAL,
			TlsCertificates: []*networking.ServerTLSSettings_TLSCertificate{pair}}, "tls.caCertificates: mode MUTUAL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			push := gatewayPush(t, &networking.Server{
				Port:  &networking.Port{Number: 8443, Name: "https", Protocol: "HTTPS"},
				Hosts: []string{"a.example.com"},
				Tls:   tc.tls,
			})
			ls := gateway.BuildListeners(ingress(), push, slog.New(slog.NewTextHandler(&logs, nil)))
			for _, l := range ls {
				nt.ValidateRecursively(t, l)
				if len(l.GetFilterChains()) > 0 {
					t.Errorf("listener %s served with %d chains", l.GetName(), len(l.GetFilterChains()))
				}
			}
			if !strings.Contains(logs.String(), tc.want) {
				t.Errorf("log %q does not say %q", logs.String(), tc.want)
			}
		})
	}
}

// gatewayPush is Bookinfo plus Gateway istio-system/gw with server s.
func gatewayPush(t *testing.T, s *networking.Server) *model.PushContext {
	t.Helper()
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, model.Config{
		Meta: model.Meta{Kind: model.KindGateway, Namespace: "istio-system", Name: "gw"},
		Spec: &networking.Gateway{Selector: map[string]string{"istio": "ingressgateway"}, Servers: []*networking.Server{s}},
	})
	return in.PushContext()
}

// TestPassthroughAnyName: a tls route for sniHosts "*" matches every
// server name with a chain without server_names; Envoy refuses "*" as a
// server name (resource.Validate checks it, as build does).
func TestPassthroughAnyName(t *testing.T) {
	ls, _ := build(t, bookinfoWith(t, mustAbs(t, "testdata/passthrough-any.yaml")))
	chains := listenerNamed(t, ls, "0.0.0.0_8443").GetFilterChains()
	if len(chains) != 1 {
		t.Fatalf("%d chains, want 1", len(chains))
	}
	if names := chains[0].GetFilterChainMatch().GetServerNames(); len(names) != 0 {
		t.Errorf("server_names %v: want none (every name)", names)
	}
}
