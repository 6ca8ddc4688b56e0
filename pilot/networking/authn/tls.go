package authn

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Names Istio's inbound mTLS uses.
const (
	// SDSCluster is the agent's SDS cluster in the Envoy bootstrap.
	SDSCluster = "sds-grpc"
	// SecretDefault is the workload certificate and key.
	SecretDefault = "default"
	// SecretRootCA is the mesh root the peer certificate is checked against.
	SecretRootCA = "ROOTCA"
	// TransportTLS and TransportRaw are the transport protocols the TLS
	// inspector reports.
	TransportTLS = "tls"
	TransportRaw = "raw_buffer"
)

// IstioALPN are the ALPN values Istio sidecars offer on mTLS connections;
// a PERMISSIVE chain matches them to tell Istio mTLS from an
// application's own TLS. The order is istiod's (it does not matter to
// Envoy).
var IstioALPN = []string{"istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"}

// ServerALPN is what the inbound TLS server negotiates.
var ServerALPN = []string{"h2", "http/1.1"}

// SDSSecret returns the SdsSecretConfig of secret name from the agent.
func SDSSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &corev3.ConfigSource{
		ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
			ApiType:                   corev3.ApiConfigSource_GRPC,
			TransportApiVersion:       corev3.ApiVersion_V3,
			SetNodeOnFirstMessageOnly: true,
			GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: SDSCluster},
			}}},
		}},
	}}
}

// ServerTLSContext is the DownstreamTlsContext of Istio mTLS: the
// workload's certificate (SDS default), peers verified against the mesh
// root (SDS ROOTCA), a client certificate required, TLS 1.2 or later.
func ServerTLSContext() *tlsv3.DownstreamTlsContext {
	return &tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
			AlpnProtocols:                  ServerALPN,
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{SDSSecret(SecretDefault)},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         &tlsv3.CertificateValidationContext{},
					ValidationContextSdsSecretConfig: SDSSecret(SecretRootCA),
				},
			},
		},
	}
}

// ServerTransportSocket wraps ServerTLSContext as a filter chain's transport socket.
func ServerTransportSocket() (*corev3.TransportSocket, error) {
	cfg, err := anypb.New(ServerTLSContext())
	if err != nil {
		return nil, fmt.Errorf("inbound mTLS transport socket: %w", err)
	}
	return &corev3.TransportSocket{Name: wellknown.TransportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: cfg}}, nil
}

// TLSInspector returns the listener filter that detects TLS and ALPN, which
// filter chains matching on transport_protocol need.
func TLSInspector() (*listenerv3.ListenerFilter, error) {
	cfg, err := anypb.New(&tlsinspectorv3.TlsInspector{})
	if err != nil {
		return nil, fmt.Errorf("tls_inspector: %w", err)
	}
	return &listenerv3.ListenerFilter{Name: wellknown.TLSInspector, ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: cfg}}, nil
}

// ChainVariant is one filter chain a port needs for its mode.
type ChainVariant struct {
	// Suffix distinguishes the chain's name ("" plaintext, "-mtls", "-reject").
	Suffix string
	// TransportProtocol and ApplicationProtocols go into the chain's match.
	TransportProtocol    string
	ApplicationProtocols []string
	// TLS says the chain terminates Istio mTLS.
	TLS bool
	// Reject says the chain only closes connections (plaintext on STRICT).
	Reject bool
}

// Variants returns the filter chains a port in mode m needs, mTLS first:
//
//	STRICT      tls → mTLS; raw_buffer → reject
//	PERMISSIVE  tls with Istio ALPN → mTLS; raw_buffer → plaintext
//	DISABLE     plaintext, no transport match
//
// A STRICT port rejects plaintext explicitly: otherwise it would fall to
// the listener's default (passthrough) chain.
func Variants(m Mode) []ChainVariant {
	switch m {
	case ModeStrict:
		return []ChainVariant{
			{Suffix: "-mtls", TransportProtocol: TransportTLS, TLS: true},
			{Suffix: "-reject", TransportProtocol: TransportRaw, Reject: true},
		}
	case ModeDisable:
		return []ChainVariant{{}}
	}
	return []ChainVariant{
		{Suffix: "-mtls", TransportProtocol: TransportTLS, ApplicationProtocols: IstioALPN, TLS: true},
		{TransportProtocol: TransportRaw},
	}
}
