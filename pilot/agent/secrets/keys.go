package secrets

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"strings"

	"github.com/meshpilot/meshpilot/internal/pki"
)

// keyType is the workload key's algorithm.
type keyType string

const (
	keyECDSA keyType = "ecdsa"
	keyRSA   keyType = "rsa"
	// rsaBits is Istio's WORKLOAD_RSA_KEY_SIZE default.
	rsaBits = 2048
)

// parseKeyType reads Options.KeyType; empty means ECDSA.
func parseKeyType(s string) (keyType, error) {
	switch strings.ToLower(s) {
	case "", string(keyECDSA):
		return keyECDSA, nil
	case string(keyRSA):
		return keyRSA, nil
	}
	return "", fmt.Errorf("secrets: key type %q: want %q or %q", s, keyECDSA, keyRSA)
}

// checkSPIFFE requires id to be spiffe://TRUST_DOMAIN/path.
func checkSPIFFE(id string) error {
	u, err := url.Parse(id)
	if err != nil || u.Scheme != "spiffe" || u.Host == "" || u.Path == "" {
		return fmt.Errorf("secrets: identity %q: not a SPIFFE ID (spiffe://TRUST_DOMAIN/ns/NS/sa/SA)", id)
	}
	return nil
}

// newKeyAndCSR makes a private key of type kt and a CSR for it whose only
// SAN is the URI identity. It returns the key, its PEM (SEC1 "EC PRIVATE
// KEY" or PKCS#1 "RSA PRIVATE KEY", as Istio's agent writes them) and the
// CSR's PEM.
func newKeyAndCSR(kt keyType, identity string) (crypto.Signer, []byte, []byte, error) {
	u, err := url.Parse(identity)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("identity %q: %w", identity, err)
	}
	var (
		key   crypto.Signer
		block *pem.Block
	)
	switch kt {
	case keyRSA:
		k, err := rsa.GenerateKey(rand.Reader, rsaBits)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("generate RSA key: %w", err)
		}
		key, block = k, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
	default:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("generate ECDSA key: %w", err)
		}
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("encode ECDSA key: %w", err)
		}
		key, block = k, &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create CSR for %s: %w", identity, err)
	}
	return key, pem.EncodeToMemory(block), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// parseCerts decodes data as PEM certificates (at least one); what names
// the source in errors.
func parseCerts(what string, data []byte) ([]*x509.Certificate, error) {
	certs, err := pki.ParseCertificates(what, data)
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s: no PEM certificate", what)
	}
	return certs, nil
}

// keyMatches reports whether key is the private half of cert's public key.
func keyMatches(key crypto.Signer, cert *x509.Certificate) bool {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// checkChain verifies that chain[0] is issued, through chain[1:] as
// intermediates, by roots, for any usage (workload certificates carry
// ServerAuth and ClientAuth).
func checkChain(chain []*x509.Certificate, roots []*x509.Certificate) error {
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// hasURI reports whether cert carries the URI SAN id.
func hasURI(cert *x509.Certificate, id string) bool {
	for _, u := range cert.URIs {
		if u.String() == id {
			return true
		}
	}
	return false
}
