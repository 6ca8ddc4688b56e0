package model

import (
	corev1 "k8s.io/api/core/v1"
)

// SecretSnapshot is an immutable view of the Secrets that gateway
// credentials (credentialName, SDS "kubernetes://NAME") come from.
type SecretSnapshot interface {
	// Secret returns the Secret of that namespace and name, nil if none.
	// The Secret is shared: callers must not modify it.
	Secret(namespace, name string) *corev1.Secret
}

// SecretSource hands out the current SecretSnapshot. A source applies a
// change to its snapshot before it asks for the push of that change, so a
// PushContext built for the push holds it.
type SecretSource interface {
	SecretSnapshot() SecretSnapshot
}

// AccessState is the state of a credential access decision.
type AccessState uint8

// Access states.
const (
	// AccessPending: no decision yet; one is being made, and a push follows it.
	AccessPending AccessState = iota
	AccessAllowed
	AccessDenied
)

// String names the state.
func (s AccessState) String() string {
	switch s {
	case AccessAllowed:
		return "allowed"
	case AccessDenied:
		return "denied"
	default:
		return "pending"
	}
}

// AccessDecision answers whether an identity may read the credentials of a
// namespace; Reason says why it may not (or why there is no answer yet).
type AccessDecision struct {
	State  AccessState
	Reason string
}

// CredentialAccess decides whether a verified workload identity may read the
// credentials of a namespace other than its own. Decide never blocks: without
// a decision it answers AccessPending, has one made in the background, and
// asks for a push of that namespace's credentials once it is made.
type CredentialAccess interface {
	Decide(id VerifiedIdentity, namespace string) AccessDecision
}

// noSecrets is the SecretSnapshot of an environment without a source.
type noSecrets struct{}

func (noSecrets) Secret(string, string) *corev1.Secret { return nil }

// Secrets returns the credential Secrets this snapshot was built with
// (empty when the environment has no SecretSource).
func (pc *PushContext) Secrets() SecretSnapshot {
	if pc.secrets == nil {
		return noSecrets{}
	}
	return pc.secrets
}

// CredentialAccess returns the decisions on cross-namespace credentials, or
// nil when this server authorizes none.
func (pc *PushContext) CredentialAccess() CredentialAccess { return pc.credentialAccess }
