package ca

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"time"

	"github.com/meshpilot/meshpilot/internal/pki"
)

// Bundle is one signing identity: the signer's cert and key, the
// intermediates between the signer and the root (may be empty), and the
// root(s). Immutable once built: never modify a Bundle or its slices.
type Bundle struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// Chain holds the intermediates above Cert, excluding any root; nearest first.
	Chain []*x509.Certificate
	// Roots are the trust anchors (root-cert.pem may hold more than one);
	// Roots[0] is the one that signs the chain.
	Roots []*x509.Certificate
	// PEM forms, kept so they round-trip byte-exact for persistence.
	CertPEM, KeyPEM, ChainPEM, RootPEM []byte
}

// RootPool returns a new pool holding the bundle's roots.
func (b *Bundle) RootPool() *x509.CertPool {
	pool := x509.NewCertPool()
	for _, r := range b.Roots {
		pool.AddCert(r)
	}
	return pool
}

// RootExpiry is the earliest NotAfter among the roots.
func (b *Bundle) RootExpiry() time.Time {
	return earliestExpiry(b.Roots)
}

// ChainExpiry is the earliest NotAfter of Cert and the intermediates.
func (b *Bundle) ChainExpiry() time.Time {
	return earliestExpiry(append([]*x509.Certificate{b.Cert}, b.Chain...))
}

func earliestExpiry(certs []*x509.Certificate) time.Time {
	var t time.Time
	for _, c := range certs {
		if c != nil && (t.IsZero() || c.NotAfter.Before(t)) {
			t = c.NotAfter
		}
	}
	return t
}

// SelfSignedOptions for a new root CA. Zero fields take the defaults: TTL
// 10 years, KeyType ecdsa, Org "cluster.local", Now time.Now().
type SelfSignedOptions struct {
	KeyType KeyType
	TTL     time.Duration
	// Org is the subject's O; Istio puts the trust domain there.
	Org string
	Now time.Time
}

// NewSelfSigned makes a new self-signed root CA: subject O=Org with no CN,
// a CA certificate for CertSign|CRLSign|DigitalSignature with a subject key
// ID (crypto/x509 derives it from the key) and a random 128-bit serial, valid from one minute before Now.
func NewSelfSigned(opts SelfSignedOptions) (*Bundle, error) {
	if opts.TTL == 0 {
		opts.TTL = 10 * 365 * 24 * time.Hour
	}
	if opts.TTL < 0 {
		return nil, fmt.Errorf("self-signed CA: TTL %v is negative", opts.TTL)
	}
	if opts.Org == "" {
		opts.Org = "cluster.local"
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	key, err := generateKey(opts.KeyType)
	if err != nil {
		return nil, fmt.Errorf("self-signed CA: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("self-signed CA: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{opts.Org}},
		NotBefore:             opts.Now.Add(-time.Minute),
		NotAfter:              opts.Now.Add(opts.TTL),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signed CA: create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("self-signed CA: parse certificate: %w", err)
	}
	keyPEM, err := pki.MarshalPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("self-signed CA: %w", err)
	}
	certPEM := pki.EncodeCertificates(cert)
	return &Bundle{
		Cert:    cert,
		Key:     key,
		Roots:   []*x509.Certificate{cert},
		CertPEM: certPEM,
		KeyPEM:  keyPEM,
		RootPEM: certPEM,
	}, nil
}

// isSelfSigned reports whether c is issued by itself: same subject and
// issuer, and its signature verifies with its own key.
func isSelfSigned(c *x509.Certificate) bool {
	return bytes.Equal(c.RawSubject, c.RawIssuer) &&
		c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) == nil
}
