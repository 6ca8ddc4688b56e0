package secrets

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/meshpilot/meshpilot/internal/pki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	securityapi "istio.io/api/security/v1alpha1"
)

// redacted replaces the token wherever an error message quotes it.
const redacted = "<token redacted>"

// issue makes a new key and CSR, has the CA sign it and checks the answer:
// a chain of at least two certificates (leaf first, root last, as Istio's
// client requires), whose leaf is for our key and Identity and verifies up
// to the root. Errors never hold the token.
func (m *Manager) issue(ctx context.Context) (*Item, error) {
	token, err := m.readToken()
	if err != nil {
		return nil, err
	}
	item, err := m.issueWith(ctx, token)
	if err != nil && token != "" && strings.Contains(err.Error(), token) {
		err = errors.New(strings.ReplaceAll(err.Error(), token, redacted))
	}
	return item, err
}

// readToken returns TokenFile's content without surrounding space, "" when
// no TokenFile is configured.
func (m *Manager) readToken() (string, error) {
	if m.opts.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(m.opts.TokenFile)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", m.opts.TokenFile, err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("token file %s: empty", m.opts.TokenFile)
	}
	return token, nil
}

func (m *Manager) issueWith(ctx context.Context, token string) (*Item, error) {
	creds, err := m.transportCredentials()
	if err != nil {
		return nil, err
	}
	key, keyPEM, csrPEM, err := newKeyAndCSR(m.keyType, m.opts.Identity)
	if err != nil {
		return nil, err
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, m.opts.DialOptions...)
	conn, err := grpc.NewClient(m.opts.CAAddress, dial...)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", m.opts.CAAddress, err)
	}
	defer conn.Close()

	md := metadata.MD{}
	if token != "" {
		md.Set("authorization", "Bearer "+token)
	}
	if m.opts.ClusterID != "" {
		md.Set("ClusterID", m.opts.ClusterID)
	}
	callCtx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, md), m.opts.RequestTimeout)
	defer cancel()
	start := time.Now()
	m.metrics.request()
	resp, err := securityapi.NewIstioCertificateServiceClient(conn).CreateCertificate(callCtx, &securityapi.IstioCertificateRequest{
		Csr:              string(csrPEM),
		ValidityDuration: int64(m.opts.TTL / time.Second),
	})
	m.metrics.latency(time.Since(start))
	if err != nil {
		m.metrics.failure()
		return nil, fmt.Errorf("CA %s: CreateCertificate: %w", m.opts.CAAddress, err)
	}
	item, err := m.checkResponse(resp.GetCertChain(), key, keyPEM)
	if err != nil {
		m.metrics.failure()
		return nil, fmt.Errorf("CA %s: CreateCertificate response: %w", m.opts.CAAddress, err)
	}
	return item, nil
}

// transportCredentials trusts RootCertFile (read now: it may have been
// written or rotated since the last issuance) or the system roots, and
// verifies CAServerName, or CAAddress's host when that is empty.
func (m *Manager) transportCredentials() (credentials.TransportCredentials, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: m.opts.CAServerName}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(m.opts.CAAddress)
		if err != nil {
			return nil, fmt.Errorf("CA address %q: %w", m.opts.CAAddress, err)
		}
		cfg.ServerName = host
	}
	if m.opts.RootCertFile == "" {
		return credentials.NewTLS(cfg), nil
	}
	data, err := os.ReadFile(m.opts.RootCertFile)
	if err != nil {
		return nil, fmt.Errorf("CA root certificate file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("CA root certificate file %s: no PEM certificate", m.opts.RootCertFile)
	}
	cfg.RootCAs = pool
	return credentials.NewTLS(cfg), nil
}

// checkResponse turns the CA's chain into the workload item: the leaf must
// be for key and carry Identity, and the chain must verify up to its last
// element, the root. The item's chain is the leaf and intermediates; its
// RootPEM the root. A root that differs from RootCertFile is logged (the
// CA's root may have rotated, or the file is a bundle of several).
func (m *Manager) checkResponse(chainPEM []string, key crypto.Signer, keyPEM []byte) (*Item, error) {
	if len(chainPEM) < 2 {
		return nil, fmt.Errorf("cert_chain: %d certificates, want the leaf and at least the root", len(chainPEM))
	}
	var chain []*x509.Certificate
	for i, p := range chainPEM {
		certs, err := parseCerts(fmt.Sprintf("cert_chain[%d]", i), []byte(p))
		if err != nil {
			return nil, err
		}
		chain = append(chain, certs...)
	}
	leaf, root := chain[0], chain[len(chain)-1]
	if !keyMatches(key, leaf) {
		return nil, errors.New("cert_chain[0]: the leaf is not for the key of our CSR")
	}
	if !hasURI(leaf, m.opts.Identity) {
		return nil, fmt.Errorf("cert_chain[0]: the leaf's URI SANs %v do not include %s", leaf.URIs, m.opts.Identity)
	}
	if err := checkChain(chain[:len(chain)-1], []*x509.Certificate{root}); err != nil {
		return nil, fmt.Errorf("cert_chain: does not verify up to its last certificate: %w", err)
	}
	rootPEM := pki.EncodeCertificates(root)
	m.compareRootFile(root)
	return &Item{
		Name:          WorkloadName,
		CertChainPEM:  pki.EncodeCertificates(chain[:len(chain)-1]...),
		PrivateKeyPEM: keyPEM,
		RootPEM:       rootPEM,
		NotBefore:     leaf.NotBefore,
		NotAfter:      leaf.NotAfter,
	}, nil
}

// compareRootFile logs when root is not among RootCertFile's certificates.
func (m *Manager) compareRootFile(root *x509.Certificate) {
	if m.opts.RootCertFile == "" {
		return
	}
	data, err := os.ReadFile(m.opts.RootCertFile)
	if err != nil {
		return
	}
	certs, err := parseCerts(m.opts.RootCertFile, data)
	if err != nil {
		return
	}
	for _, c := range certs {
		if bytes.Equal(c.Raw, root.Raw) {
			return
		}
	}
	m.log.Warn("the CA's root differs from the CA connection's trust anchor; serving the CA's root as ROOTCA",
		"rootCertFile", m.opts.RootCertFile, "caRootSubject", root.Subject.String())
}
