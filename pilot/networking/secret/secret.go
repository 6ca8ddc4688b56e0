// Package secret is the control plane's SDS generator: it serves, over
// ADS as istiod does, the certificates of Gateway credentialNames from the
// PushContext's Secret snapshot to gateways (router proxies) authenticated
// on the secure port: "kubernetes://NAME" to those of the Secret's
// namespace (another namespace's "kubernetes://NS/NAME" by the
// PushContext's CredentialAccess decisions, which never block), and
// "kubernetes-gateway://NS/NAME" (a Gateway API certificateRef) to those a
// translated Gateway names it for; and ConfigMap CA bundles
// ("configmap://NS/NAME-cacert"). It reads nothing but the PushContext:
// Secrets come from pilot/config/secrets.
package secret

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/credential"
	"github.com/meshpilot/meshpilot/pilot/networking/resource"
)

// Secret data keys, in the order they are tried: Kubernetes TLS Secrets
// (tls.crt, tls.key, ca.crt), then Istio's generic ones (cert, key, cacert).
var (
	certKeys = []string{corev1.TLSCertKey, "cert"}
	keyKeys  = []string{corev1.TLSPrivateKeyKey, "key"}
	caKeys   = []string{"ca.crt", "cacert"}
	// crlKeys hold the CA's certificate revocation list, next to its CA.
	crlKeys = []string{"ca.crl", "crl"}
)

// Generator serves SDS resources named kubernetes://NAME (the certificate
// chain and key of Secret NAME) and kubernetes://NAME-cacert (its CA
// certificate; else that of Secret NAME-cacert) to router proxies whose
// identity the secure port verified, from the namespace of that identity,
// or "kubernetes://NS/NAME" of another namespace NS when the PushContext's
// CredentialAccess allows the identity to list Secrets in NS; and
// "kubernetes-gateway://NS/NAME" (a Gateway API certificateRef) to the
// gateways of a translated Gateway naming it (see gatewayAPICert), with no
// CredentialAccess decision. Anything else
// — a sidecar, another namespace without that right or whose decision is
// pending (its push follows the decision), another prefix, a missing Secret
// or key — gets no resource and a log line.
// Logger may be nil (no logs).
type Generator struct {
	Logger *slog.Logger
	// CAs, if not nil, shares the marshalled configmap:// CA bundles
	// among the proxies that ask for them (one copy per bundle, not per
	// proxy).
	CAs *CACache
}

var _ model.Generator = Generator{}

// Generate returns the requested secrets proxy may read, sorted by name.
func (g Generator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if w == nil || w.Len() == 0 {
		return nil, nil
	}
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With(clientlog.String("proxy", proxy.ID))
	names := w.Names()
	sort.Strings(names)
	if proxy.Type != model.Router {
		// Sidecars read CA bundles of ConfigMaps only.
		var refused []string
		names = slices.DeleteFunc(names, func(n string) bool {
			if !strings.HasPrefix(n, credential.ConfigMapPrefix) {
				refused = append(refused, n)
				return true
			}
			return false
		})
		if len(refused) > 0 {
			log.Warn("sds refused: only gateways (router proxies) read credentials", "type", string(proxy.Type), clientlog.Strings("resources", refused))
		}
	}
	var out model.Resources
	// One line per request, not per name (a client may ask for any
	// number): the names not served and their first distinct errors.
	var notServed, errs []string
	// The proxy's verified certificateRefs, found once per request.
	refs := &certRefs{push: push, proxy: proxy}
	for _, n := range names {
		if strings.HasPrefix(n, credential.ConfigMapPrefix) && g.CAs != nil {
			r, err := g.CAs.resource(push, proxy, n)
			if err != nil {
				notServed = append(notServed, n)
				if msg := err.Error(); len(errs) < clientlog.MaxListed && !slices.Contains(errs, msg) {
					errs = append(errs, msg)
				}
				continue
			}
			out = append(out, r)
			continue
		}
		s, err := build(push, proxy, n, refs)
		if err != nil {
			notServed = append(notServed, n)
			if msg := err.Error(); len(errs) < clientlog.MaxListed && !slices.Contains(errs, msg) {
				errs = append(errs, msg)
			}
			continue
		}
		r, err := resource.Marshal(n, s)
		if err != nil {
			return nil, fmt.Errorf("sds for %s: secret %s: %w", clientlog.Truncate(proxy.ID, clientlog.MaxValue), clientlog.Truncate(n, clientlog.MaxValue), err)
		}
		out = append(out, r)
	}
	if len(notServed) > 0 {
		log.Warn("sds resources not served", clientlog.Strings("resources", notServed), clientlog.Messages("errors", errs))
	}
	return out, nil
}

// errRefused marks a request the proxy is not allowed to make.
var errRefused = errors.New("refused")

// build returns the Envoy secret for resource name.
// refs, if not nil, holds proxy's verified certificateRefs.
func build(push *model.PushContext, proxy *model.Proxy, name string, refs *certRefs) (*tlsv3.Secret, error) {
	if ref, ok := strings.CutPrefix(name, credential.ConfigMapPrefix); ok {
		return configMapCA(push, proxy, name, ref)
	}
	if ref, ok := strings.CutPrefix(name, credential.KubernetesGatewayPrefix); ok {
		if refs == nil {
			refs = &certRefs{push: push, proxy: proxy}
		}
		return gatewayAPICert(push, proxy, name, ref, refs)
	}
	ref, ok := strings.CutPrefix(name, credential.KubernetesPrefix)
	if !ok || ref == "" {
		return nil, fmt.Errorf("%w: not a %sNAME resource", errRefused, credential.KubernetesPrefix)
	}
	// As istiod: credentials go only to a gateway whose identity the secure
	// port verified (token or client certificate). The node's metadata is
	// the caller's claim; on the plaintext port anyone could make it.
	id := proxy.VerifiedIdentity
	if id == nil {
		return nil, fmt.Errorf("%w: credentials are served only to gateways authenticated on the secure port (15012), and this connection is not", errRefused)
	}
	ns := id.Namespace
	if refNS, refName, ok := strings.Cut(ref, "/"); ok {
		if refNS != ns {
			if err := authorizeCrossNamespace(push, proxy, refNS); err != nil {
				return nil, err
			}
			ns = refNS
		}
		ref = refName
	}
	if push == nil {
		return nil, errors.New("no snapshot to read secrets from")
	}
	secrets := push.Secrets()
	if base, isCA := strings.CutSuffix(ref, credential.CASuffix); isCA {
		ca, crl, err := caCert(secrets, ns, base, ref)
		if err != nil {
			return nil, err
		}
		vc := &tlsv3.CertificateValidationContext{TrustedCa: inline(ca)}
		if crl != nil {
			vc.Crl = inline(crl)
		}
		return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: vc}}, nil
	}
	return certificate(secrets, name, ns, ref)
}

// certificate returns the certificate chain and key of Secret ns/ref as
// the Envoy secret name.
func certificate(secrets model.SecretSnapshot, name, ns, ref string) (*tlsv3.Secret, error) {
	sec, err := lookup(secrets, ns, ref)
	if err != nil {
		return nil, err
	}
	cert, _ := value(sec, certKeys)
	key, _ := value(sec, keyKeys)
	if cert == nil || key == nil {
		return nil, fmt.Errorf("secret %s/%s: data: want %s and %s (or %s and %s)", ns, ref,
			certKeys[0], keyKeys[0], certKeys[1], keyKeys[1])
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: inline(cert),
		PrivateKey:       inline(key),
	}}}, nil
}

// gatewayAPICert serves kubernetes-gateway://NS/NAME, the certificate and
// key of Secret NS/NAME named by a Gateway API listener's certificateRef,
// as istiod does: only to a gateway whose identity the secure port
// verified, and only when a Gateway the Gateway API translator generated
// (model.Meta.GatewayAPI, which no hand-written config can set) in the
// identity's namespace selects the proxy and has a server with that
// credentialName. The translator checked the reference (same namespace or
// allowed by a ReferenceGrant), so no CredentialAccess decision is asked.
// There is no CA form: translated listeners do not verify clients.
func gatewayAPICert(push *model.PushContext, proxy *model.Proxy, name, ref string, refs *certRefs) (*tlsv3.Secret, error) {
	id := proxy.VerifiedIdentity
	if id == nil {
		return nil, fmt.Errorf("%w: credentials are served only to gateways authenticated on the secure port (15012), and this connection is not", errRefused)
	}
	ns, sec, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || sec == "" || strings.Contains(sec, "/") {
		return nil, fmt.Errorf("%w: not a %sNAMESPACE/NAME resource", errRefused, credential.KubernetesGatewayPrefix)
	}
	if push == nil {
		return nil, errors.New("no snapshot to read secrets from")
	}
	if !refs.has(name) {
		return nil, fmt.Errorf("%w: %s is not a certificateRef of a Gateway API Gateway of namespace %q selecting this gateway", errRefused, name, id.Namespace)
	}
	return certificate(push.Secrets(), name, ns, sec)
}

// certRefs are the SDS names of the verified certificateRefs of a proxy
// with a verified identity: the credentialNames of the servers of the
// Gateways the Gateway API translator generated in the identity's
// namespace that select the proxy. Found on first use, once per request
// however many names it holds.
type certRefs struct {
	push  *model.PushContext
	proxy *model.Proxy
	names map[string]bool
}

// has reports whether name is one of the verified certificateRefs.
func (r *certRefs) has(name string) bool {
	if r.names == nil {
		r.names = map[string]bool{}
		id := r.proxy.VerifiedIdentity
		if r.push == nil || id == nil {
			return false
		}
		for _, gw := range r.push.GatewaysFor(r.proxy) {
			if !gw.GatewayAPI || gw.Namespace != id.Namespace {
				continue
			}
			spec, _ := gw.Spec.(*networking.Gateway)
			for _, s := range spec.GetServers() {
				tls := s.GetTls()
				if cn := tls.GetCredentialName(); cn != "" {
					r.names[credential.ResourceName(cn)] = true
				}
				for _, cn := range tls.GetCredentialNames() {
					r.names[credential.ResourceName(cn)] = true
				}
			}
		}
	}
	return r.names[name]
}

// configMapSnapshot is what a SecretSnapshot of pilot/config/secrets also
// holds: the ca.crt of the cluster's ConfigMaps.
type configMapSnapshot interface {
	ConfigMapCA(namespace, name string) ([]byte, bool)
}

// configMapCA serves configmap://NAMESPACE/NAME-cacert, the ca.crt of a
// ConfigMap (a BackendTLSPolicy's CA; CA certificates are public, and a
// ConfigMap no secret store): to any proxy whose identity the secure port
// verified, of any namespace. Only the ca.crt key is ever read.
func configMapCA(push *model.PushContext, proxy *model.Proxy, name, ref string) (*tlsv3.Secret, error) {
	if proxy.VerifiedIdentity == nil {
		return nil, fmt.Errorf("%w: CA bundles are served only to proxies authenticated on the secure port (15012), and this connection is not", errRefused)
	}
	base, ok := strings.CutSuffix(ref, credential.CASuffix)
	ns, cm, ok2 := strings.Cut(base, "/")
	if !ok || !ok2 || ns == "" || cm == "" {
		return nil, fmt.Errorf("%w: not a %sNAMESPACE/NAME%s resource", errRefused, credential.ConfigMapPrefix, credential.CASuffix)
	}
	var snap configMapSnapshot
	if push != nil {
		snap, _ = push.Secrets().(configMapSnapshot)
	}
	if snap == nil {
		return nil, errors.New("no snapshot of ConfigMaps to read CA certificates from")
	}
	ca, found := snap.ConfigMapCA(ns, cm)
	if !found || len(ca) == 0 {
		return nil, fmt.Errorf("configmap %s/%s: not found, or no ca.crt", ns, cm)
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{TrustedCa: inline(ca)}}}, nil
}

// authorizeCrossNamespace lets a gateway read the credentials of namespace
// ns, not its own, only when its connection authenticated an identity
// (secure port) that the CredentialAccess allows to list Secrets there. It
// never waits: a pending decision refuses for now, and the push that
// follows the decision serves the credential.
func authorizeCrossNamespace(push *model.PushContext, proxy *model.Proxy, ns string) error {
	id := proxy.VerifiedIdentity
	if id == nil {
		return fmt.Errorf("%w: secret of namespace %q asked by a gateway of namespace %q without a verified identity (connect to the secure port)",
			errRefused, ns, proxy.ConfigNamespace())
	}
	var access model.CredentialAccess
	if push != nil {
		access = push.CredentialAccess()
	}
	if access == nil {
		return fmt.Errorf("%w: secret of namespace %q asked by %s: cross-namespace credentials are not authorized by this server",
			errRefused, ns, id.SPIFFE)
	}
	switch d := access.Decide(*id, ns); d.State {
	case model.AccessAllowed:
		return nil
	case model.AccessDenied:
		return fmt.Errorf("%w: secret of namespace %q asked by %s: forbidden: %s", errRefused, ns, id.SPIFFE, d.Reason)
	default:
		return fmt.Errorf("%w for now: secret of namespace %q asked by %s: authorization pending (%s); pushed once decided",
			errRefused, ns, id.SPIFFE, d.Reason)
	}
}

// caCert finds the CA of credential base: the ca.crt (or cacert) of Secret
// base, else of Secret base-cacert, as Istio does; with the revocation list
// (ca.crl or crl) of the same Secret, if any.
func caCert(secrets model.SecretSnapshot, ns, base, withSuffix string) (ca, crl []byte, err error) {
	var firstErr error
	for _, n := range []string{base, withSuffix} {
		sec, err := lookup(secrets, ns, n)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if ca, _ := value(sec, caKeys); ca != nil {
			crl, _ := value(sec, crlKeys)
			return ca, crl, nil
		}
	}
	if firstErr != nil {
		return nil, nil, firstErr
	}
	return nil, nil, fmt.Errorf("secret %s/%s: data: no %s or %s (nor in %s)", ns, base, caKeys[0], caKeys[1], withSuffix)
}

func lookup(secrets model.SecretSnapshot, ns, name string) (*corev1.Secret, error) {
	sec := secrets.Secret(ns, name)
	if sec == nil {
		return nil, fmt.Errorf("secret %s/%s: not found", ns, name)
	}
	return sec, nil
}

// value returns the first non-empty data entry among keys.
func value(sec *corev1.Secret, keys []string) ([]byte, string) {
	for _, k := range keys {
		if v := sec.Data[k]; len(v) > 0 {
			return v, k
		}
	}
	return nil, ""
}

func inline(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}
