// Package kubeca keeps the CA's Kubernetes state as Istio does: the
// self-signed root and its key persisted in Secret istio-ca-secret (so a
// restarted or second replica signs with the same root), and the root
// certificate published as ConfigMap istio-ca-root-cert in every namespace
// (so workloads can verify the control plane and each other).
package kubeca

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/pilot/ca"
)

// SecretName is the Secret, in the control plane's namespace, that holds the
// self-signed CA's certificate and key (Istio's CASecret).
const SecretName = "istio-ca-secret"

// SecretType is the type Istio gives SecretName.
const SecretType corev1.SecretType = "istio.io/ca-root"

// Keys of SecretName's data, named as Istio's security/pkg/pki/ca names them.
const (
	// SecretCACertKey holds the CA's signing certificate (the root itself for
	// a self-signed CA).
	SecretCACertKey = ca.CACertFile
	// SecretCAKeyKey holds the signing certificate's private key.
	SecretCAKeyKey = ca.CAKeyFile
	// SecretCertChainKey holds the chain from the signing certificate up to,
	// not including, the root; empty for a self-signed root.
	SecretCertChainKey = ca.CertChainFile
	// SecretPrivateKeyKey is written empty, as Istio does; never read.
	SecretPrivateKeyKey = "key.pem"
	// SecretRootCertKey holds the root certificate(s). Secrets written by
	// older Istio releases leave it empty; ca-cert.pem is then the root.
	SecretRootCertKey = ca.RootCertFile
)

// LoadOrCreate returns the CA bundle stored in Secret ns/istio-ca-secret or,
// when there is none, generates one with generate and creates the Secret.
// created reports whether this call created it.
//
// Replicas starting together may both find no Secret: the one whose Create
// fails with AlreadyExists re-reads the Secret and uses the winner's bundle,
// discarding its own. A Secret that exists but does not parse is an error
// naming the Secret and the key; it is never overwritten, so an operator's
// root is never silently replaced.
func LoadOrCreate(ctx context.Context, client kubernetes.Interface, ns string, generate func() (*ca.Bundle, error), log *slog.Logger) (b *ca.Bundle, created bool, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := ns + "/" + SecretName
	secrets := client.CoreV1().Secrets(ns)

	s, err := secrets.Get(ctx, SecretName, metav1.GetOptions{})
	switch {
	case err == nil:
		b, err := BundleFromSecret(s)
		if err != nil {
			return nil, false, err
		}
		log.Info("CA root loaded from Secret", "secret", name, "root", subject(b))
		return b, false, nil
	case !apierrors.IsNotFound(err):
		return nil, false, fmt.Errorf("reading Secret %s: %w", name, err)
	}

	gen, err := generate()
	if err != nil {
		return nil, false, fmt.Errorf("generating the CA for Secret %s: %w", name, err)
	}
	if gen == nil || len(gen.CertPEM) == 0 || len(gen.KeyPEM) == 0 {
		return nil, false, fmt.Errorf("generating the CA for Secret %s: generator returned no certificate or key", name)
	}
	_, err = secrets.Create(ctx, SecretFor(ns, gen), metav1.CreateOptions{})
	if err == nil {
		log.Info("CA root generated and stored in Secret", "secret", name, "root", subject(gen))
		return gen, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("creating Secret %s: %w", name, err)
	}

	// Another replica created it between our Get and Create: use its root.
	s, err = secrets.Get(ctx, SecretName, metav1.GetOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("reading Secret %s after losing the race to create it: %w", name, err)
	}
	b, err = BundleFromSecret(s)
	if err != nil {
		return nil, false, err
	}
	log.Info("CA root created concurrently by another replica; using it", "secret", name, "root", subject(b))
	return b, false, nil
}

// SecretFor returns Secret ns/istio-ca-secret holding b, laid out as Istio
// lays it out (type istio.io/ca-root; key.pem empty).
func SecretFor(ns string, b *ca.Bundle) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns},
		Type:       SecretType,
		Data: map[string][]byte{
			SecretCACertKey:     b.CertPEM,
			SecretCAKeyKey:      b.KeyPEM,
			SecretCertChainKey:  b.ChainPEM,
			SecretPrivateKeyKey: {},
			SecretRootCertKey:   b.RootPEM,
		},
	}
}

// BundleFromSecret parses a Secret laid out as SecretFor lays it out, or as
// any Istio release wrote istio-ca-secret (older ones leave root-cert.pem
// empty: the self-signed ca-cert.pem is then the root). Errors name the
// Secret and the key.
func BundleFromSecret(s *corev1.Secret) (*ca.Bundle, error) {
	b, err := ca.ParseBundle(s.Data[SecretCACertKey], s.Data[SecretCAKeyKey],
		s.Data[SecretCertChainKey], s.Data[SecretRootCertKey])
	if err != nil {
		// ParseBundle's errors start with the key (file) name.
		return nil, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return b, nil
}

// subject names the root for logs (never the PEM).
func subject(b *ca.Bundle) string {
	if b == nil || len(b.Roots) == 0 || b.Roots[0] == nil {
		return ""
	}
	return b.Roots[0].Subject.String()
}
