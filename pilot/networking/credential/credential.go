// Package credential names the secrets Envoy fetches over SDS, as Istio
// names them, and says where Envoy fetches them from: the workload's own
// certificate and root from the agent, Gateway credentialNames from the
// control plane.
package credential

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// SDS names as Istio uses them.
const (
	// SDSCluster is the agent's SDS server cluster in the Envoy bootstrap.
	SDSCluster = "sds-grpc"
	// WorkloadCert is the workload's key and certificate chain ("default").
	WorkloadCert = "default"
	// RootCA is the mesh's root certificate.
	RootCA = "ROOTCA"
	// KubernetesPrefix prefixes a credentialName (a Kubernetes Secret).
	KubernetesPrefix = "kubernetes://"
	// KubernetesGatewayPrefix prefixes the credentialName of a Gateway API
	// listener's certificateRef ("kubernetes-gateway://NS/NAME"): served
	// only to the gateways of the translated Gateway naming it.
	KubernetesGatewayPrefix = "kubernetes-gateway://"
	// CASuffix names the CA part of a credentialName secret.
	CASuffix = "-cacert"
	// ConfigMapPrefix prefixes a credential that is the ca.crt of a
	// ConfigMap ("configmap://NAMESPACE/NAME", a BackendTLSPolicy's CA).
	ConfigMapPrefix = "configmap://"
	// FileRootPrefix prefixes a CA bundle file the agent reads and serves
	// ("file-root:PATH", a DestinationRule's caCertificates);
	// "file-root:system" is the proxy's OS CA bundle.
	FileRootPrefix = "file-root:"
	// FileCertPrefix prefixes a client certificate and key the agent
	// reads ("file-cert:CERT~KEY"); FileCertSeparator separates the two.
	FileCertPrefix    = "file-cert:"
	FileCertSeparator = "~"
)

// ResourceName is the SDS name of a credentialName, as istiod names it: a
// name with a scheme ("configmap://NS/NAME", "invalid://") as it is, any
// other one a Kubernetes Secret (KubernetesPrefix + name).
func ResourceName(credentialName string) string {
	if strings.Contains(credentialName, "://") {
		return credentialName
	}
	return KubernetesPrefix + credentialName
}

// AgentSDSConfig is the SdsSecretConfig fetching secret name from the
// agent's SDS server (cluster sds-grpc).
func AgentSDSConfig(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &corev3.ConfigSource{
		ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
			ApiType:                   corev3.ApiConfigSource_GRPC,
			SetNodeOnFirstMessageOnly: true,
			TransportApiVersion:       corev3.ApiVersion_V3,
			GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: SDSCluster},
			}}},
		}},
	}}
}
