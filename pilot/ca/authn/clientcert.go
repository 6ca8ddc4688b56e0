package authn

import (
	"context"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// ClientCert authenticates a caller by the client certificate of its TLS
// connection. It relies on the server having verified the chain against the
// mesh root (tls.Config.ClientCAs with VerifyClientCertIfGiven or
// RequireAndVerifyClientCert): only State.VerifiedChains counts, never
// unverified PeerCertificates. The leaf must carry exactly one URI SAN, a
// SPIFFE ID "spiffe://TRUST_DOMAIN/ns/NS/sa/SA" of TrustDomain().
type ClientCert struct {
	// TrustDomain returns the mesh's trust domain; nil means
	// DefaultTrustDomain.
	TrustDomain func() string
}

var _ Authenticator = (*ClientCert)(nil)

// Name returns "client-cert".
func (c *ClientCert) Name() string { return "client-cert" }

// Authenticate returns the identity of the verified client certificate.
// No TLS peer or no verified chain gives ErrNoCredential; a leaf without
// exactly one SPIFFE URI of the trust domain an error wrapping
// ErrUnauthenticated.
func (c *ClientCert) Authenticate(ctx context.Context) (*Caller, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil, fmt.Errorf("%w: no peer information", ErrNoCredential)
	}
	var info credentials.TLSInfo
	switch ai := p.AuthInfo.(type) {
	case credentials.TLSInfo:
		info = ai
	case *credentials.TLSInfo:
		info = *ai
	default:
		return nil, fmt.Errorf("%w: connection is not TLS (auth type %q)", ErrNoCredential, p.AuthInfo.AuthType())
	}
	chains := info.State.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return nil, fmt.Errorf("%w: no verified client certificate", ErrNoCredential)
	}
	leaf := chains[0][0]
	if n := len(leaf.URIs); n != 1 {
		return nil, fmt.Errorf("%w: client certificate (serial %s) has %d URI SANs, want exactly one SPIFFE ID", ErrUnauthenticated, leaf.SerialNumber, n)
	}
	uri := leaf.URIs[0].String()
	certTD, ns, sa, err := ParseSPIFFEID(uri)
	if err != nil {
		return nil, fmt.Errorf("%w: client certificate (serial %s) URI SAN: %w", ErrUnauthenticated, leaf.SerialNumber, err)
	}
	td, err := trustDomain(c.TrustDomain)
	if err != nil {
		return nil, err
	}
	if certTD != td {
		return nil, fmt.Errorf("%w: client certificate (serial %s) identity %q is not of trust domain %q", ErrUnauthenticated, leaf.SerialNumber, uri, td)
	}
	return &Caller{
		Identities:     []string{uri},
		Namespace:      ns,
		ServiceAccount: sa,
		Source:         SourceCert,
	}, nil
}
