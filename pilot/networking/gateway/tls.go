package gateway

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/credential"
)

// alpnHTTPS is what a TLS-terminating gateway offers clients, as in Istio.
var alpnHTTPS = []string{"h2", "http/1.1"}

// CredentialSecret is the SDS name of a credentialName's certificate and
// key ("kubernetes://NAME"; a name with a scheme, such as a Gateway API
// certificateRef's "kubernetes-gateway://NS/NAME", as it is), served by the
// control plane over ADS.
func CredentialSecret(credentialName string) string {
	return credential.ResourceName(credentialName)
}

// CredentialCASecret is the SDS name of a credentialName's CA certificate
// ("kubernetes://NAME-cacert", "kubernetes-gateway://NS/NAME-cacert").
func CredentialCASecret(credentialName string) string {
	return credential.ResourceName(credentialName) + credential.CASuffix
}

// adsSecret fetches secret name from the control plane over ADS.
func adsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: cluster.ADSConfigSource()}
}

// downstreamTLS returns the transport socket terminating TLS for server s
// (tls mode SIMPLE, MUTUAL, OPTIONAL_MUTUAL or ISTIO_MUTUAL). Certificates
// come from credentialName or credentialNames (up to two, e.g. RSA and
// ECDSA) over ADS (kubernetes://NAME), else from the file pairs of
// tlsCertificates (up to two), else from the files serverCertificate and
// privateKey; ISTIO_MUTUAL uses the workload's own certificate (default,
// ROOTCA) from the agent (sds-grpc). Clients are verified (MUTUAL,
// OPTIONAL_MUTUAL) against caCertCredentialName's CA over ADS
// (kubernetes://NAME-cacert), else the first credential's
// (kubernetes://NAME-cacert), else the file caCertificates (of tls, else
// of the first tlsCertificates entry). alpn is what the server offers
// clients (none for TCP).
func downstreamTLS(s *networking.Server, alpn []string) (*corev3.TransportSocket, error) {
	tls := s.GetTls()
	common := &tlsv3.CommonTlsContext{AlpnProtocols: alpn}
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: common}
	mode := tls.GetMode()
	mutual := mode == networking.ServerTLSSettings_MUTUAL || mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL
	if mode == networking.ServerTLSSettings_ISTIO_MUTUAL {
		common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{credential.AgentSDSConfig(credential.WorkloadCert)}
		common.ValidationContextType = combined(tls, credential.AgentSDSConfig(credential.RootCA))
		ctx.RequireClientCertificate = wrapperspb.Bool(true)
	} else {
		if mode != networking.ServerTLSSettings_SIMPLE && !mutual {
			return nil, fmt.Errorf("tls.mode %s: not a terminating mode", mode)
		}
		credentials, err := serverCredentials(tls)
		if err != nil {
			return nil, err
		}
		if err := serverCertificates(tls, credentials, common); err != nil {
			return nil, err
		}
		if mutual {
			if err := clientValidation(tls, credentials, common); err != nil {
				return nil, err
			}
		}
	}
	if mode == networking.ServerTLSSettings_MUTUAL {
		ctx.RequireClientCertificate = wrapperspb.Bool(true)
	}
	params, err := tlsParams(tls)
	if err != nil {
		return nil, err
	}
	common.TlsParams = params
	cfg, err := anypb.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return &corev3.TransportSocket{Name: cluster.TransportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: cfg}}, nil
}

// maxServerCertificates is the most credentialNames or tlsCertificates a
// server may list (Istio's API: one RSA and one ECDSA certificate).
const maxServerCertificates = 2

// serverCredentials returns the credential names of tls: credentialName,
// or credentialNames; an error when both are set or there are too many.
func serverCredentials(tls *networking.ServerTLSSettings) ([]string, error) {
	names := tls.GetCredentialNames()
	switch {
	case len(names) > 0 && tls.GetCredentialName() != "":
		return nil, fmt.Errorf("tls.credentialNames: set together with tls.credentialName; set only one")
	case len(names) > maxServerCertificates:
		return nil, fmt.Errorf("tls.credentialNames: %d names, at most %d", len(names), maxServerCertificates)
	case tls.GetCredentialName() != "":
		return []string{tls.GetCredentialName()}, nil
	}
	for i, n := range names {
		if n == "" {
			return nil, fmt.Errorf("tls.credentialNames[%d]: empty", i)
		}
	}
	return names, nil
}

// serverCertificates sets the certificates the server presents: the
// credentials over ADS, else the tlsCertificates files, else
// serverCertificate and privateKey.
func serverCertificates(tls *networking.ServerTLSSettings, credentials []string, common *tlsv3.CommonTlsContext) error {
	mode := tls.GetMode()
	pairs := tls.GetTlsCertificates()
	switch {
	case len(credentials) > 0:
		if len(pairs) > 0 || tls.GetServerCertificate() != "" {
			return fmt.Errorf("tls: credentialName(s) set together with certificate files; set only one")
		}
		for _, n := range credentials {
			common.TlsCertificateSdsSecretConfigs = append(common.TlsCertificateSdsSecretConfigs, adsSecret(CredentialSecret(n)))
		}
	case len(pairs) > 0:
		if tls.GetServerCertificate() != "" || tls.GetPrivateKey() != "" {
			return fmt.Errorf("tls.tlsCertificates: set together with serverCertificate/privateKey; set only one")
		}
		if len(pairs) > maxServerCertificates {
			return fmt.Errorf("tls.tlsCertificates: %d entries, at most %d", len(pairs), maxServerCertificates)
		}
		for i, p := range pairs {
			if p.GetServerCertificate() == "" || p.GetPrivateKey() == "" {
				return fmt.Errorf("tls.tlsCertificates[%d]: needs serverCertificate and privateKey", i)
			}
			common.TlsCertificates = append(common.TlsCertificates, &tlsv3.TlsCertificate{
				CertificateChain: fileSource(p.GetServerCertificate()),
				PrivateKey:       fileSource(p.GetPrivateKey()),
			})
		}
	default:
		if tls.GetServerCertificate() == "" || tls.GetPrivateKey() == "" {
			return fmt.Errorf("tls: mode %s needs credentialName(s), tlsCertificates, or serverCertificate and privateKey", mode)
		}
		common.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: fileSource(tls.GetServerCertificate()),
			PrivateKey:       fileSource(tls.GetPrivateKey()),
		}}
	}
	return nil
}

// clientValidation sets how a MUTUAL or OPTIONAL_MUTUAL server verifies
// clients: caCertCredentialName's CA over ADS, else the first credential's,
// else a CA file.
func clientValidation(tls *networking.ServerTLSSettings, credentials []string, common *tlsv3.CommonTlsContext) error {
	switch {
	case tls.GetCaCertCredentialName() != "":
		common.ValidationContextType = combined(tls, adsSecret(CredentialCASecret(tls.GetCaCertCredentialName())))
		return nil
	case len(credentials) > 0:
		common.ValidationContextType = combined(tls, adsSecret(CredentialCASecret(credentials[0])))
		return nil
	}
	ca := tls.GetCaCertificates()
	if ca == "" && len(tls.GetTlsCertificates()) > 0 {
		ca = tls.GetTlsCertificates()[0].GetCaCertificates()
	}
	if ca == "" {
		return fmt.Errorf("tls.caCertificates: mode %s without credentialName(s) or caCertCredentialName needs a CA file", tls.GetMode())
	}
	vc := validation(tls)
	vc.TrustedCa = fileSource(ca)
	common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
	return nil
}

// combined verifies clients against the CA of sds, with tls's own checks.
func combined(tls *networking.ServerTLSSettings, sds *tlsv3.SdsSecretConfig) *tlsv3.CommonTlsContext_CombinedValidationContext {
	return &tlsv3.CommonTlsContext_CombinedValidationContext{
		CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext:         validation(tls),
			ValidationContextSdsSecretConfig: sds,
		}}
}

// validation carries subjectAltNames (exact matches), the certificate
// hashes a client certificate must have, caCrl (a CRL file) and
// insecureSkipVerify (verify, but accept an untrusted chain, as Istio).
func validation(tls *networking.ServerTLSSettings) *tlsv3.CertificateValidationContext {
	vc := &tlsv3.CertificateValidationContext{
		VerifyCertificateHash: tls.GetVerifyCertificateHash(),
		VerifyCertificateSpki: tls.GetVerifyCertificateSpki(),
	}
	for _, san := range tls.GetSubjectAltNames() {
		vc.MatchTypedSubjectAltNames = append(vc.MatchTypedSubjectAltNames, &tlsv3.SubjectAltNameMatcher{
			SanType: tlsv3.SubjectAltNameMatcher_DNS,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}},
		})
	}
	if tls.GetCaCrl() != "" {
		vc.Crl = fileSource(tls.GetCaCrl())
	}
	if tls.GetInsecureSkipVerify().GetValue() {
		vc.TrustChainVerification = tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED
	}
	return vc
}

func fileSource(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

var tlsVersions = map[networking.ServerTLSSettings_TLSProtocol]tlsv3.TlsParameters_TlsProtocol{
	networking.ServerTLSSettings_TLS_AUTO: tlsv3.TlsParameters_TLS_AUTO,
	networking.ServerTLSSettings_TLSV1_0:  tlsv3.TlsParameters_TLSv1_0,
	networking.ServerTLSSettings_TLSV1_1:  tlsv3.TlsParameters_TLSv1_1,
	networking.ServerTLSSettings_TLSV1_2:  tlsv3.TlsParameters_TLSv1_2,
	networking.ServerTLSSettings_TLSV1_3:  tlsv3.TlsParameters_TLSv1_3,
}

// tlsParams carries minProtocolVersion, maxProtocolVersion and cipherSuites;
// nil when none is set.
func tlsParams(tls *networking.ServerTLSSettings) (*tlsv3.TlsParameters, error) {
	minV, okMin := tlsVersions[tls.GetMinProtocolVersion()]
	maxV, okMax := tlsVersions[tls.GetMaxProtocolVersion()]
	if !okMin {
		return nil, fmt.Errorf("tls.minProtocolVersion %s: unknown", tls.GetMinProtocolVersion())
	}
	if !okMax {
		return nil, fmt.Errorf("tls.maxProtocolVersion %s: unknown", tls.GetMaxProtocolVersion())
	}
	if minV == tlsv3.TlsParameters_TLS_AUTO && maxV == tlsv3.TlsParameters_TLS_AUTO && len(tls.GetCipherSuites()) == 0 {
		return nil, nil
	}
	return &tlsv3.TlsParameters{
		TlsMinimumProtocolVersion: minV,
		TlsMaximumProtocolVersion: maxV,
		CipherSuites:              tls.GetCipherSuites(),
	}, nil
}
