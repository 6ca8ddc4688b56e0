package cluster

import (
	"fmt"
	"sort"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/credential"
)

// TransportSocketTLS is Envoy's TLS transport socket name.
const TransportSocketTLS = "envoy.transport_sockets.tls"

// ALPN values Istio advertises to in-mesh upstreams (with metadata exchange).
var (
	alpnInMesh   = []string{"istio-peer-exchange", "istio"}
	alpnInMeshH2 = []string{"istio-peer-exchange", "istio", "h2"}
)

// IstioMutualSNI is the SNI Istio sends for ISTIO_MUTUAL: "outbound_.PORT_.SUBSET_.HOST".
func IstioMutualSNI(port uint32, subset, host string) string {
	return "outbound_." + strconv.FormatUint(uint64(port), 10) + "_." + subset + "_." + host
}

// credentialSDSConfig fetches a credentialName secret from the control
// plane over ADS.
func credentialSDSConfig(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: ADSConfigSource()}
}

// tlsTarget is what a cluster's TLS settings need to know about it.
type tlsTarget struct {
	port   model.Port
	subset string
	host   string
	// serviceAccounts are the destination's SPIFFE IDs, sorted.
	serviceAccounts []string
	// verifyAtClient is istiod's VERIFY_CERTIFICATE_AT_CLIENT: SIMPLE and
	// MUTUAL without caCertificates verify against the OS CA bundle.
	verifyAtClient bool
}

// SystemCACertificates is the caCertificates value Istio gives TLS
// origination without one when VERIFY_CERTIFICATE_AT_CLIENT is on; its
// agent SDS name, "file-root:system", is the proxy's OS CA bundle.
const SystemCACertificates = "system"

// rootCAFile is the caCertificates file tls verifies the server against:
// its own, else, with verifyAtClient, SystemCACertificates; "" for none
// (Istio rewrites an empty caCertificates to "system" the same way).
func rootCAFile(tls *networking.ClientTLSSettings, verifyAtClient bool) string {
	if ca := tls.GetCaCertificates(); ca != "" || !verifyAtClient {
		return ca
	}
	return SystemCACertificates
}

// applyTLS sets the cluster's transport socket from tls (nil or DISABLE: none).
func applyTLS(c *clusterv3.Cluster, tls *networking.ClientTLSSettings, t tlsTarget) error {
	ctx := upstreamTLS(tls, t)
	if ctx == nil {
		return nil
	}
	a, err := anypb.New(ctx)
	if err != nil {
		return fmt.Errorf("cluster %s: transport_socket: %w", c.Name, err)
	}
	c.TransportSocket = &corev3.TransportSocket{Name: TransportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}
	return nil
}

// upstreamTLS builds the UpstreamTlsContext of tls for a target, or nil.
func upstreamTLS(tls *networking.ClientTLSSettings, t tlsTarget) *tlsv3.UpstreamTlsContext {
	h2 := t.port.Protocol.IsHTTP2()
	common := &tlsv3.CommonTlsContext{}
	out := &tlsv3.UpstreamTlsContext{CommonTlsContext: common, Sni: tls.GetSni()}
	sans := tls.GetSubjectAltNames()
	switch tls.GetMode() {
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		if out.Sni == "" {
			out.Sni = IstioMutualSNI(t.port.Port, t.subset, t.host)
		}
		if len(sans) == 0 {
			sans = t.serviceAccounts
		}
		common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{credential.AgentSDSConfig(credential.WorkloadCert)}
		common.ValidationContextType = combined(sans, credential.AgentSDSConfig(credential.RootCA))
		setCRL(common, tls.GetCaCrl())
		common.AlpnProtocols = alpnInMesh
		if h2 {
			common.AlpnProtocols = alpnInMeshH2
		}
		return out
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		if h2 {
			common.AlpnProtocols = []string{"h2"}
		}
		mutual := tls.GetMode() == networking.ClientTLSSettings_MUTUAL
		skipVerify := tls.GetInsecureSkipVerify().GetValue()
		switch {
		case tls.GetCredentialName() != "":
			name := credential.ResourceName(tls.GetCredentialName())
			if mutual {
				common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{credentialSDSConfig(name)}
			}
			if !skipVerify {
				common.ValidationContextType = combined(sans, credentialSDSConfig(name+credential.CASuffix))
			}
		default:
			if mutual {
				common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{
					credential.AgentSDSConfig(credential.FileCertPrefix + tls.GetClientCertificate() + credential.FileCertSeparator + tls.GetPrivateKey()),
				}
			}
			if ca := rootCAFile(tls, t.verifyAtClient); !skipVerify && ca != "" {
				common.ValidationContextType = combined(sans, credential.AgentSDSConfig(credential.FileRootPrefix+ca))
				setCRL(common, tls.GetCaCrl())
			}
		}
		return out
	}
	return nil
}

// setCRL makes the validation context of common (a combined one) check the
// server certificate against the certificate revocation list in the file
// crl (tls.caCrl); "" leaves it alone. Istio ignores caCrl with a
// credentialName, whose Secret carries its own CRL.
func setCRL(common *tlsv3.CommonTlsContext, crl string) {
	cv, ok := common.ValidationContextType.(*tlsv3.CommonTlsContext_CombinedValidationContext)
	if crl == "" || !ok {
		return
	}
	cv.CombinedValidationContext.DefaultValidationContext.Crl = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: crl}}
}

// combined is a validation context from SDS secret root plus exact subject
// alt name matches (match_subject_alt_names, any SAN type, as Istio sets it).
func combined(sans []string, root *tlsv3.SdsSecretConfig) *tlsv3.CommonTlsContext_CombinedValidationContext {
	def := &tlsv3.CertificateValidationContext{}
	for _, s := range sans {
		def.MatchSubjectAltNames = append(def.MatchSubjectAltNames, &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s},
		})
	}
	return &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
		DefaultValidationContext:         def,
		ValidationContextSdsSecretConfig: root,
	}}
}

// ServiceAccounts returns the identities an Istio mTLS cluster of svc
// accepts, sorted: the SPIFFE IDs of the workloads behind svc
// ("spiffe://TRUST_DOMAIN/ns/NS/sa/SA"), from its endpoints, and, as
// Istio appends them, the service's SubjectAltNames (a ServiceEntry's).
func ServiceAccounts(push *model.PushContext, svc *model.Service) []string {
	td := push.Mesh.GetTrustDomain()
	if td == "" {
		td = "cluster.local"
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range push.Endpoints.Endpoints(svc.Hostname) {
		if e.ServiceAccount == "" {
			continue
		}
		ns := e.Namespace
		if ns == "" {
			ns = svc.Namespace
		}
		id := "spiffe://" + td + "/ns/" + ns + "/sa/" + e.ServiceAccount
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, san := range svc.SubjectAltNames {
		if !seen[san] {
			seen[san] = true
			out = append(out, san)
		}
	}
	sort.Strings(out)
	return out
}
