// Package authn tells who is calling the CA and the secure xDS port (15012),
// the way istiod does: a Kubernetes service-account JWT in the
// "authorization: Bearer" gRPC metadata, checked with a TokenReview (KubeJWT),
// or a client certificate the TLS handshake verified against the mesh root,
// whose SPIFFE URI SAN names the caller (ClientCert). Chain tries several in
// order.
//
// Every failure wraps ErrUnauthenticated except a failed TokenReview call,
// which wraps ErrReview (the API server, not the client, is at fault). Error
// messages never contain the token or its payload.
package authn

import (
	"context"
	"errors"
	"fmt"
)

// Caller sources.
const (
	SourceJWT  = "jwt"
	SourceCert = "cert"
)

// Caller is an authenticated client.
type Caller struct {
	// Identities are SPIFFE IDs, e.g.
	// "spiffe://cluster.local/ns/default/sa/bookinfo-productpage".
	Identities []string
	// Namespace and ServiceAccount are those of Identities[0].
	Namespace, ServiceAccount string
	// Source is SourceJWT or SourceCert.
	Source string
}

// Authenticator authenticates the caller of a gRPC call from its context
// (incoming metadata, peer).
type Authenticator interface {
	Name() string
	Authenticate(ctx context.Context) (*Caller, error)
}

// ErrUnauthenticated is wrapped by every authentication failure.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrNoCredential (which wraps ErrUnauthenticated) means an authenticator
// found nothing to check (no bearer token, no verified client certificate),
// so the next one in a Chain may try.
var ErrNoCredential = fmt.Errorf("%w: no credential", ErrUnauthenticated)

// ErrReview is wrapped by errors of the TokenReview call itself (API server
// unreachable, timeout, forbidden): the server should answer
// codes.Unavailable, not blame the client. It does not wrap
// ErrUnauthenticated.
var ErrReview = errors.New("token review failed")

// Chain tries each authenticator in order. ErrNoCredential moves on to the
// next; any other error stops the chain (a bad token is not rescued by a
// certificate). When no authenticator found a credential, or the chain is
// empty, the error wraps ErrNoCredential.
type Chain []Authenticator

// Authenticate returns the first authenticator's Caller or error that is not
// ErrNoCredential.
func (c Chain) Authenticate(ctx context.Context) (*Caller, error) {
	for _, a := range c {
		caller, err := a.Authenticate(ctx)
		if err == nil {
			if caller == nil || len(caller.Identities) == 0 {
				// Fail closed on a broken authenticator.
				return nil, fmt.Errorf("%w: authenticator %s returned no identity", ErrUnauthenticated, a.Name())
			}
			return caller, nil
		}
		if !errors.Is(err, ErrNoCredential) {
			return nil, fmt.Errorf("%s: %w", a.Name(), err)
		}
	}
	return nil, fmt.Errorf("%w: send a service-account token (authorization: Bearer) or a client certificate", ErrNoCredential)
}

// Name returns "chain".
func (c Chain) Name() string { return "chain" }

type callerKey struct{}

// NewContext returns a copy of ctx carrying c.
func NewContext(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// FromContext returns the Caller NewContext stored in ctx.
func FromContext(ctx context.Context) (*Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*Caller)
	return c, ok && c != nil
}
