package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshpilot/meshpilot/internal/pki"
)

// Policy is the signing policy.
type Policy struct {
	// DefaultTTL is used when a request asks for none (DEFAULT_WORKLOAD_CERT_TTL, 24h).
	DefaultTTL time.Duration
	// MaxTTL is the longest TTL a request may ask for (MAX_WORKLOAD_CERT_TTL, 90 days).
	MaxTTL time.Duration
	// Backdate moves NotBefore back from now to allow for clock skew (2 minutes).
	Backdate time.Duration
}

// DefaultPolicy is Istio's policy: 24h default TTL, 90 days maximum, and
// certificates backdated 2 minutes.
func DefaultPolicy() Policy {
	return Policy{DefaultTTL: 24 * time.Hour, MaxTTL: 90 * 24 * time.Hour, Backdate: 2 * time.Minute}
}

// withDefaults fills zero fields from DefaultPolicy.
func (p Policy) withDefaults() Policy {
	d := DefaultPolicy()
	if p.DefaultTTL <= 0 {
		p.DefaultTTL = d.DefaultTTL
	}
	if p.MaxTTL <= 0 {
		p.MaxTTL = d.MaxTTL
	}
	switch {
	case p.Backdate == 0:
		p.Backdate = d.Backdate
	case p.Backdate < 0:
		p.Backdate = 0
	}
	return p
}

// signer is what Sign reads atomically: the bundle, the intermediates a
// leaf needs (the signer's own certificate unless it is the root, then
// b.Chain) and their PEM followed by the root's, appended to every leaf.
type signer struct {
	bundle        *Bundle
	intermediates []*x509.Certificate
	tail          []string
}

func newSigner(b *Bundle) *signer {
	s := &signer{bundle: b}
	if len(b.Roots) == 0 || !b.Cert.Equal(b.Roots[0]) {
		s.intermediates = append(s.intermediates, b.Cert)
	}
	s.intermediates = append(s.intermediates, b.Chain...)
	for _, c := range s.intermediates {
		s.tail = append(s.tail, string(pki.EncodeCertificates(c)))
	}
	if len(b.Roots) > 0 {
		s.tail = append(s.tail, string(pki.EncodeCertificates(b.Roots[0])))
	}
	return s
}

// Authority signs workload certificates with the current Bundle. The bundle
// can be swapped at runtime (plug-in reload) while Sign runs concurrently.
type Authority struct {
	policy  Policy
	current atomic.Pointer[signer]

	mu   sync.Mutex
	subs []chan struct{}
}

// NewAuthority returns an Authority signing with b under p. Zero fields of
// p take DefaultPolicy's values (as do negative TTLs); a negative Backdate
// means no backdating.
func NewAuthority(b *Bundle, p Policy) *Authority {
	a := &Authority{policy: p.withDefaults()}
	a.current.Store(newSigner(b))
	return a
}

// Bundle returns the current signing bundle.
func (a *Authority) Bundle() *Bundle { return a.current.Load().bundle }

// Policy returns the signing policy.
func (a *Authority) Policy() Policy { return a.policy }

// SetBundle swaps the signer and notifies subscribers without blocking:
// each subscriber channel has a buffer of one and a pending notification
// absorbs later ones.
func (a *Authority) SetBundle(b *Bundle) {
	a.current.Store(newSigner(b))
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ch := range a.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Subscribe returns a channel that receives a value after every SetBundle
// (coalesced). It is never closed.
func (a *Authority) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	a.mu.Lock()
	a.subs = append(a.subs, ch)
	a.mu.Unlock()
	return ch
}

// ttl resolves a requested TTL against the policy.
func (a *Authority) ttl(requested time.Duration) (time.Duration, error) {
	switch {
	case requested < 0:
		return 0, fmt.Errorf("%w: TTL %v is negative", ErrTTL, requested)
	case requested == 0:
		return a.policy.DefaultTTL, nil
	case requested > a.policy.MaxTTL:
		return 0, fmt.Errorf("%w: TTL %v, maximum %v", ErrTTL, requested, a.policy.MaxTTL)
	}
	return requested, nil
}

// Sign issues a workload certificate for csr's public key whose only SAN is
// the URI identity (the SPIFFE ID the caller is authorised for; the caller
// has already run CheckIdentity). ttl 0 means Policy.DefaultTTL; a ttl
// above MaxTTL or below 0 wraps ErrTTL. NotAfter is capped at the signer's
// NotAfter. The leaf has an empty subject (so its SAN extension is
// critical), KeyUsage DigitalSignature|KeyEncipherment, ExtKeyUsage
// ServerAuth and ClientAuth, no CA bit, a random 128-bit serial and the
// signer's key ID as AKI. The result is the chain in PEM, one certificate
// per string: the leaf; the signer's certificate when it is an
// intermediate (not Roots[0]); b.Chain; then Roots[0].
func (a *Authority) Sign(csr *x509.CertificateRequest, identity string, ttl time.Duration) ([]string, error) {
	if csr == nil {
		return nil, fmt.Errorf("%w: nil", ErrInvalidCSR)
	}
	if err := checkCSRKey(csr); err != nil { // fail closed if ParseCSR was skipped
		return nil, err
	}
	u, err := url.Parse(identity)
	if err != nil || u.Scheme != "spiffe" || u.Host == "" {
		return nil, fmt.Errorf("%w: identity %q is not a SPIFFE ID", ErrIdentity, identity)
	}
	s := a.current.Load()
	tmpl, err := a.leafTemplate(s.bundle, ttl)
	if err != nil {
		return nil, err
	}
	tmpl.URIs = []*url.URL{u}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.bundle.Cert, csr.PublicKey, s.bundle.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %s: %w", identity, err)
	}
	out := make([]string, 0, 1+len(s.tail))
	out = append(out, string(pki.EncodeCertificates(&x509.Certificate{Raw: der})))
	return append(out, s.tail...), nil
}

// leafTemplate is the template shared by workload and serving certificates.
func (a *Authority) leafTemplate(b *Bundle, requested time.Duration) (*x509.Certificate, error) {
	ttl, err := a.ttl(requested)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(ttl)
	if notAfter.After(b.Cert.NotAfter) {
		notAfter = b.Cert.NotAfter
	}
	return &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-a.policy.Backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
	}, nil
}

// IssueServing makes a fresh ECDSA P-256 key and a serving certificate for
// the control plane itself (SANs hosts: each IP address an IP SAN, every
// other name a DNS SAN; ExtKeyUsage ServerAuth and ClientAuth; ttl as for
// Sign). The tls.Certificate holds the leaf and the
// intermediates (the signer's certificate unless it is the root, then
// b.Chain), not the root, and has Leaf set.
func (a *Authority) IssueServing(hosts []string, ttl time.Duration) (*tls.Certificate, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("serving certificate: no host names")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: generate key: %w", err)
	}
	s := a.current.Load()
	tmpl, err := a.leafTemplate(s.bundle, ttl)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	for _, h := range hosts {
		if ip, err := netip.ParseAddr(h); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.bundle.Cert, key.Public(), s.bundle.Key)
	if err != nil {
		return nil, fmt.Errorf("serving certificate for %v: %w", hosts, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: parse: %w", err)
	}
	chain := [][]byte{der}
	for _, c := range s.intermediates {
		chain = append(chain, c.Raw)
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: crypto.Signer(key), Leaf: leaf}, nil
}
