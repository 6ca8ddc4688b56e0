package ca

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/meshpilot/meshpilot/internal/pki"
)

// ParseBundle validates plug-in CA PEM material and builds a Bundle:
//   - keyPEM (ca-key.pem) matches certPEM (ca-cert.pem, exactly one certificate);
//   - the certificate is a CA (IsCA and KeyUsage CertSign);
//   - it chains through chainPEM's intermediates to one of rootPEM's roots
//     (x509 Verify, any extended key usage), and nothing is expired.
//
// chainPEM may be Istio's cert-chain.pem, which often holds ca-cert itself
// and the root too: certificates equal to Cert and self-signed ones are
// dropped from Chain. If rootPEM is empty, the self-signed certificates of
// chainPEM are the roots; if there are none and Cert is self-signed, Cert is
// the root (self-signed mode). Errors name the file.
func ParseBundle(certPEM, keyPEM, chainPEM, rootPEM []byte) (*Bundle, error) {
	return parseBundleAt(certPEM, keyPEM, chainPEM, rootPEM, time.Now())
}

func parseBundleAt(certPEM, keyPEM, chainPEM, rootPEM []byte, now time.Time) (*Bundle, error) {
	certs, err := pki.ParseCertificates(CACertFile, certPEM)
	if err != nil {
		return nil, err
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("%s: holds %d certificates, want exactly 1", CACertFile, len(certs))
	}
	cert := certs[0]
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("%s: not a CA certificate (basic constraints CA:FALSE or missing)", CACertFile)
	}
	if cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%s: key usage lacks certificate signing", CACertFile)
	}

	key, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CAKeyFile, err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%s: does not match %s", CAKeyFile, CACertFile)
	}

	chainCerts, err := pki.ParseCertificates(CertChainFile, chainPEM)
	if err != nil {
		return nil, err
	}
	var intermediates, chainRoots []*x509.Certificate
	for _, c := range chainCerts {
		switch {
		case bytes.Equal(c.Raw, cert.Raw):
		case isSelfSigned(c):
			chainRoots = append(chainRoots, c)
		default:
			intermediates = append(intermediates, c)
		}
	}

	roots, err := pki.ParseCertificates(RootCertFile, rootPEM)
	if err != nil {
		return nil, err
	}
	switch {
	case len(roots) > 0:
	case len(chainRoots) > 0:
		roots = chainRoots
		rootPEM = pki.EncodeCertificates(roots...)
	case isSelfSigned(cert):
		roots = []*x509.Certificate{cert}
		rootPEM = certPEM
	default:
		return nil, fmt.Errorf("%s: missing, and %s is not self-signed", RootCertFile, CACertFile)
	}
	for i, r := range roots {
		if err := checkValidity(r, now); err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", RootCertFile, i+1, err)
		}
	}
	for i, c := range intermediates {
		if err := checkValidity(c, now); err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", CertChainFile, i+1, err)
		}
	}
	if err := checkValidity(cert, now); err != nil {
		return nil, fmt.Errorf("%s: %w", CACertFile, err)
	}

	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	inter := x509.NewCertPool()
	for _, c := range intermediates {
		inter.AddCert(c)
	}
	chains, err := cert.Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: does not chain to %s through %s: %w", CACertFile, RootCertFile, CertChainFile, err)
	}
	// The shortest verified path fixes the order: Cert, intermediates
	// nearest first, then the root that signs them, which goes first in Roots.
	path := chains[0]
	for _, c := range chains[1:] {
		if len(c) < len(path) {
			path = c
		}
	}
	anchor := path[len(path)-1]
	var chain []*x509.Certificate
	if len(path) > 2 { // len(path) == 1 when Cert is itself a root
		chain = append(chain, path[1:len(path)-1]...)
	}
	ordered := []*x509.Certificate{anchor}
	for _, r := range roots {
		if !bytes.Equal(r.Raw, anchor.Raw) {
			ordered = append(ordered, r)
		}
	}
	return &Bundle{
		Cert:     cert,
		Key:      key,
		Chain:    chain,
		Roots:    ordered,
		CertPEM:  certPEM,
		KeyPEM:   keyPEM,
		ChainPEM: chainPEM,
		RootPEM:  rootPEM,
	}, nil
}

// checkValidity fails if c is not valid at now.
func checkValidity(c *x509.Certificate, now time.Time) error {
	if now.After(c.NotAfter) {
		return fmt.Errorf("expired at %s", c.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(c.NotBefore) {
		return fmt.Errorf("not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}
