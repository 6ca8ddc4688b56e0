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
)

// alpnHTTPS is what a TLS-terminating gateway offers clients, as in Istio.
var alpnHTTPS = []string{"h2", "http/1.1"}

// CredentialSecret is the SDS name of a credentialName's certificate and
// key ("kubernetes://NAME"), served by the control plane over ADS.
func CredentialSecret(credentialName string) string {
	return cluster.CredentialPrefix + credentialName
}

// CredentialCASecret is the SDS name of a credentialName's CA certificate
// ("kubernetes://NAME-cacert").
func CredentialCASecret(credentialName string) string {
	return cluster.CredentialPrefix + credentialName + cluster.CredentialCASuffix
}

// adsSecret fetches secret name from the control plane over ADS.
func adsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: cluster.ADSConfigSource()}
}

// downstreamTLS returns the transport socket terminating TLS for server s
// (tls mode SIMPLE, MUTUAL, OPTIONAL_MUTUAL or ISTIO_MUTUAL). Certificates
// come from credentialName over ADS (kubernetes://NAME, and
// kubernetes://NAME-cacert to verify clients), else from the files
// serverCertificate, privateKey and caCertificates; ISTIO_MUTUAL uses the
// workload's own certificate (default, ROOTCA) from the agent (sds-grpc).
// alpn is what the server offers clients (none for TCP).
func downstreamTLS(s *networking.Server, alpn []string) (*corev3.TransportSocket, error) {
	tls := s.GetTls()
	common := &tlsv3.CommonTlsContext{AlpnProtocols: alpn}
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: common}
	mode := tls.GetMode()
	mutual := mode == networking.ServerTLSSettings_MUTUAL || mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL
	switch {
	case mode == networking.ServerTLSSettings_ISTIO_MUTUAL:
		common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{cluster.AgentSDSConfig(cluster.SecretDefault)}
		common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         validation(tls),
				ValidationContextSdsSecretConfig: cluster.AgentSDSConfig(cluster.SecretRootCA),
			}}
		ctx.RequireClientCertificate = wrapperspb.Bool(true)
	case mode != networking.ServerTLSSettings_SIMPLE && !mutual:
		return nil, fmt.Errorf("tls.mode %s: not a terminating mode", mode)
	case tls.GetCredentialName() != "":
		common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{adsSecret(CredentialSecret(tls.GetCredentialName()))}
		if mutual {
			common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         validation(tls),
					ValidationContextSdsSecretConfig: adsSecret(CredentialCASecret(tls.GetCredentialName())),
				}}
		}
	default:
		if tls.GetServerCertificate() == "" || tls.GetPrivateKey() == "" {
			return nil, fmt.Errorf("tls: mode %s needs credentialName, or serverCertificate and privateKey", mode)
		}
		common.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: fileSource(tls.GetServerCertificate()),
			PrivateKey:       fileSource(tls.GetPrivateKey()),
		}}
		if mutual {
			if tls.GetCaCertificates() == "" {
				return nil, fmt.Errorf("tls.caCertificates: mode %s without credentialName needs a CA file", mode)
			}
			vc := validation(tls)
			vc.TrustedCa = fileSource(tls.GetCaCertificates())
			common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
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

// validation carries subjectAltNames (exact matches) and the certificate
// hashes a client certificate must have.
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
