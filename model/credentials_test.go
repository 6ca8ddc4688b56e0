package model

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// secretMap is a SecretSnapshot of fixed Secrets by "namespace/name".
type secretMap map[string]*corev1.Secret

func (m secretMap) Secret(ns, name string) *corev1.Secret { return m[ns+"/"+name] }

// swappedSecrets is a SecretSource whose snapshot the test replaces.
type swappedSecrets struct{ cur secretMap }

func (s *swappedSecrets) SecretSnapshot() SecretSnapshot { return s.cur }

// TestPushContextTakesSecretSnapshot: every build takes the source's current
// snapshot, whatever the request reuses from the previous build, and a
// built PushContext keeps the snapshot it was built with.
func TestPushContextTakesSecretSnapshot(t *testing.T) {
	v1 := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: "cert", ResourceVersion: "1"}}
	v2 := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: "cert", ResourceVersion: "2"}}
	src := &swappedSecrets{cur: secretMap{"gw/cert": v1}}
	access := decideAll(AccessAllowed)
	env := &Environment{ServiceDiscovery: fakeRegistry{}, ConfigStore: fakeStore{}, Endpoints: NewEndpointIndex(),
		DomainSuffix: "cluster.local", Secrets: src, CredentialAccess: access}
	first := NewPushContext(env, nil, nil)
	if got := first.Secrets().Secret("gw", "cert"); got != v1 {
		t.Fatalf("first build: %v, want version 1", got)
	}
	if first.CredentialAccess() == nil || first.CredentialAccess().Decide(VerifiedIdentity{}, "x").State != AccessAllowed {
		t.Fatal("CredentialAccess not handed to the PushContext")
	}
	for name, req := range map[string]*PushRequest{
		"secret change":         NewPushRequest(true, ReasonSecretTrigger, ConfigKey{Kind: KindSecret, Namespace: "gw", Name: "cert"}),
		"virtual service only":  NewPushRequest(true, ReasonConfigUpdate, ConfigKey{Kind: KindVirtualService, Namespace: "gw", Name: "vs"}),
		"full push without key": {Full: true},
	} {
		src.cur = secretMap{"gw/cert": v2}
		next := NewPushContext(env, first, req)
		if got := next.Secrets().Secret("gw", "cert"); got != v2 {
			t.Errorf("%s: rebuilt with %v, want version 2", name, got)
		}
		if got := first.Secrets().Secret("gw", "cert"); got != v1 {
			t.Errorf("%s: the earlier PushContext now reads %v, want its own version 1", name, got)
		}
		src.cur = secretMap{"gw/cert": v1}
	}

	bare := NewPushContext(&Environment{ServiceDiscovery: fakeRegistry{}, ConfigStore: fakeStore{}, Endpoints: NewEndpointIndex()}, nil, nil)
	if bare.Secrets().Secret("gw", "cert") != nil || bare.CredentialAccess() != nil {
		t.Error("an environment without secrets serves some")
	}
}

// decideAll is a CredentialAccess answering state to everything.
type decideAll AccessState

func (d decideAll) Decide(VerifiedIdentity, string) AccessDecision {
	return AccessDecision{State: AccessState(d)}
}
