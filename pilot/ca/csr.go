package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// Sentinel errors, wrapped with detail (errors.Is works); the gRPC server
// maps them to status codes.
var (
	ErrInvalidCSR = errors.New("invalid CSR")
	ErrTTL        = errors.New("requested TTL exceeds the maximum")
	ErrIdentity   = errors.New("CSR identity not allowed for caller")
)

// MaxCSRSize is the largest PEM CSR ParseCSR accepts.
const MaxCSRSize = 64 << 10

// ParseCSR decodes exactly one PEM "CERTIFICATE REQUEST" block (only
// whitespace around it), parses it, checks its self-signature and requires
// an acceptable public key: ECDSA P-256 or P-384, RSA 2048 to 8192 bits, or
// Ed25519. Every failure wraps ErrInvalidCSR with a short reason that never
// echoes the input.
func ParseCSR(pemBytes []byte) (*x509.CertificateRequest, error) {
	if len(pemBytes) > MaxCSRSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidCSR, MaxCSRSize)
	}
	trimmed := bytes.TrimSpace(pemBytes)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrInvalidCSR)
	}
	if !bytes.HasPrefix(trimmed, []byte("-----BEGIN ")) {
		return nil, fmt.Errorf("%w: not PEM", ErrInvalidCSR)
	}
	block, rest := pem.Decode(trimmed)
	if block == nil {
		return nil, fmt.Errorf("%w: not PEM", ErrInvalidCSR)
	}
	if block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("%w: PEM block type is not CERTIFICATE REQUEST", ErrInvalidCSR)
	}
	if len(block.Headers) > 0 {
		return nil, fmt.Errorf("%w: PEM block has headers", ErrInvalidCSR)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("%w: data after the CERTIFICATE REQUEST block", ErrInvalidCSR)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed DER", ErrInvalidCSR)
	}
	if err := checkCSRKey(csr); err != nil {
		return nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature does not verify", ErrInvalidCSR)
	}
	return csr, nil
}

// checkCSRKey accepts ECDSA P-256/P-384, RSA 2048..8192 and Ed25519 keys.
func checkCSRKey(csr *x509.CertificateRequest) error {
	switch k := csr.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
		return fmt.Errorf("%w: ECDSA curve %s not allowed (want P-256 or P-384)", ErrInvalidCSR, k.Curve.Params().Name)
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < 2048 || bits > 8192 {
			return fmt.Errorf("%w: RSA key of %d bits not allowed (want 2048 to 8192)", ErrInvalidCSR, bits)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("%w: public key algorithm %s not allowed", ErrInvalidCSR, csr.PublicKeyAlgorithm)
}

// CheckIdentity requires csr to carry exactly one SAN, a URI equal to want
// (a SPIFFE ID such as spiffe://cluster.local/ns/default/sa/productpage),
// and no DNS, IP or email SANs. Failure wraps ErrIdentity, saying what the
// CSR asked for and what was allowed.
func CheckIdentity(csr *x509.CertificateRequest, want string) error {
	if want == "" {
		return fmt.Errorf("%w: no identity allowed for caller", ErrIdentity)
	}
	uris := make([]string, len(csr.URIs))
	for i, u := range csr.URIs {
		uris[i] = u.String()
	}
	if others := len(csr.DNSNames) + len(csr.IPAddresses) + len(csr.EmailAddresses); others > 0 {
		return fmt.Errorf("%w: CSR asks for URI SANs %q plus %d DNS, %d IP and %d email SANs; allowed only URI %q",
			ErrIdentity, uris, len(csr.DNSNames), len(csr.IPAddresses), len(csr.EmailAddresses), want)
	}
	if len(uris) != 1 || uris[0] != want {
		return fmt.Errorf("%w: CSR asks for URI SANs %q; allowed %q", ErrIdentity, uris, want)
	}
	return nil
}
