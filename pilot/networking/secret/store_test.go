package secret_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/secret"
)

// TestStoreReplace reports exactly the Secrets added, changed (data or
// type) and removed, and serves the latest content.
func TestStoreReplace(t *testing.T) {
	s := secret.NewStore()
	a := tlsSecret("ns", "a", map[string]string{"tls.crt": "C1", "tls.key": "K1"})
	b := tlsSecret("ns", "b", map[string]string{"tls.crt": "C", "tls.key": "K"})
	if got := s.Replace([]*corev1.Secret{b, a}); !slices.Equal(got, []secret.Name{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}}) {
		t.Fatalf("first Replace changed %v", got)
	}
	same := tlsSecret("ns", "b", map[string]string{"tls.crt": "C", "tls.key": "K"})
	a2 := tlsSecret("ns", "a", map[string]string{"tls.crt": "C2", "tls.key": "K1"})
	c := tlsSecret("other", "c", map[string]string{"cacert": "CA"})
	if got := s.Replace([]*corev1.Secret{a2, same, c}); !slices.Equal(got, []secret.Name{{Namespace: "ns", Name: "a"}, {Namespace: "other", Name: "c"}}) {
		t.Fatalf("second Replace changed %v, want ns/a and other/c", got)
	}
	if sec, _ := s.Secret("ns", "a"); string(sec.Data["tls.crt"]) != "C2" {
		t.Fatalf("ns/a not updated: %q", sec.Data["tls.crt"])
	}
	if got := s.Replace([]*corev1.Secret{a2}); !slices.Equal(got, []secret.Name{{Namespace: "ns", Name: "b"}, {Namespace: "other", Name: "c"}}) {
		t.Fatalf("third Replace changed %v, want the removed ns/b and other/c", got)
	}
	if sec, err := s.Secret("ns", "b"); sec != nil || err != nil {
		t.Fatalf("removed ns/b still served: %v %v", sec, err)
	}
	if got := s.Replace([]*corev1.Secret{a2}); len(got) != 0 {
		t.Fatalf("unchanged Replace changed %v", got)
	}
}

// TestChain takes the first lister holding the Secret and reports a
// lister's error only when no other has it.
func TestChain(t *testing.T) {
	first := secret.Static{tlsSecret("ns", "x", map[string]string{"tls.crt": "FIRST"})}
	second := secret.Static{
		tlsSecret("ns", "x", map[string]string{"tls.crt": "SECOND"}),
		tlsSecret("ns", "y", map[string]string{"tls.crt": "Y"}),
	}
	c := secret.Chain{failing{}, first, second}
	if sec, err := c.Secret("ns", "x"); err != nil || string(sec.Data["tls.crt"]) != "FIRST" {
		t.Fatalf("ns/x: %v %v, want the first lister's", sec, err)
	}
	if sec, err := c.Secret("ns", "y"); err != nil || string(sec.Data["tls.crt"]) != "Y" {
		t.Fatalf("ns/y: %v %v", sec, err)
	}
	if _, err := c.Secret("ns", "absent"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("absent: error %v, want the failing lister's", err)
	}
}

// fakeAuthz allows the namespaces in allowed and records its calls.
type fakeAuthz struct {
	allowed map[string]bool
	calls   []string
}

func (f *fakeAuthz) Authorize(_ context.Context, id model.VerifiedIdentity, ns string) error {
	f.calls = append(f.calls, id.Namespace+"/"+id.ServiceAccount+"->"+ns)
	if f.allowed[ns] {
		return nil
	}
	return fmt.Errorf("%w: not in %s", secret.ErrForbidden, ns)
}

func verified(p *model.Proxy, sa string) *model.Proxy {
	p.VerifiedIdentity = &model.VerifiedIdentity{
		SPIFFE:    "spiffe://cluster.local/ns/" + p.Namespace + "/sa/" + sa,
		Namespace: p.Namespace, ServiceAccount: sa,
	}
	return p
}

// TestCrossNamespace: kubernetes://NS/NAME of another namespace is served
// only to a gateway with a verified identity the Authorizer allows in NS
// (certificate and CA); unverified gateways and refused identities get
// nothing, and the refusal is logged without key material.
func TestCrossNamespace(t *testing.T) {
	var sink testutil.Buffer
	authz := &fakeAuthz{allowed: map[string]bool{"other": true}}
	g := secret.Generator{Secrets: secrets, Authorizer: authz, Logger: slog.New(slog.NewTextHandler(&sink, nil))}
	names := []string{"kubernetes://other/other-cert", "kubernetes://istio-system/generic-cacert", "kubernetes://istio-system/generic"}

	got := generate(t, g, verified(gatewayProxy("gw"), "ingress"), names...)
	if c := got["kubernetes://other/other-cert"].GetTlsCertificate().GetCertificateChain().GetInlineBytes(); string(c) != "OCERT" {
		t.Errorf("allowed namespace: certificate %q, want OCERT", c)
	}
	if len(got) != 1 {
		t.Errorf("got %d secrets, want only other's (istio-system not allowed): %v", len(got), got)
	}
	if !slices.Contains(authz.calls, "gw/ingress->istio-system") {
		t.Errorf("authorizer calls %v", authz.calls)
	}
	if !strings.Contains(sink.String(), "forbidden: not in istio-system") {
		t.Errorf("refusal not logged: %s", sink.String())
	}
	if strings.Contains(sink.String(), "GKEY") || strings.Contains(sink.String(), "OKEY") {
		t.Errorf("key material logged: %s", sink.String())
	}

	authz.allowed["istio-system"] = true
	got = generate(t, g, verified(gatewayProxy("gw"), "ingress"), names...)
	if ca := got["kubernetes://istio-system/generic-cacert"].GetValidationContext().GetTrustedCa().GetInlineBytes(); string(ca) != "GCA" {
		t.Errorf("CA %q, want GCA", ca)
	}
	if len(got) != 3 {
		t.Errorf("got %d secrets, want 3", len(got))
	}

	// Plaintext (no verified identity): nothing, and the authorizer is not asked.
	authz.calls = nil
	if got := generate(t, g, unverifiedGateway("gw"), names...); len(got) != 0 {
		t.Errorf("unverified gateway got %v", got)
	}
	if len(authz.calls) != 0 {
		t.Errorf("authorizer asked for an unverified gateway: %v", authz.calls)
	}
	noAuthz := secret.Generator{Secrets: secrets}
	if got := generate(t, noAuthz, verified(gatewayProxy("gw"), "ingress"), names...); len(got) != 0 {
		t.Errorf("without an authorizer got %v", got)
	}
}

// TestCRL serves a credential's revocation list (ca.crl, or crl in a
// generic Secret) with its CA.
func TestCRL(t *testing.T) {
	g := secret.Generator{Secrets: secret.Static{
		tlsSecret("ns", "tls", map[string]string{"tls.crt": "C", "tls.key": "K", "ca.crt": "CA", "ca.crl": "CRL"}),
		tlsSecret("ns", "generic-cacert", map[string]string{"cacert": "GCA", "crl": "GCRL"}),
		tlsSecret("ns", "nocrl", map[string]string{"ca.crt": "NCA"}),
	}}
	got := generate(t, g, gatewayProxy("ns"), "kubernetes://tls-cacert", "kubernetes://generic-cacert", "kubernetes://nocrl-cacert")
	for name, want := range map[string]string{"kubernetes://tls-cacert": "CRL", "kubernetes://generic-cacert": "GCRL"} {
		if crl := got[name].GetValidationContext().GetCrl().GetInlineBytes(); string(crl) != want {
			t.Errorf("%s: crl %q, want %q", name, crl, want)
		}
	}
	if vc := got["kubernetes://nocrl-cacert"].GetValidationContext(); vc.GetCrl() != nil || string(vc.GetTrustedCa().GetInlineBytes()) != "NCA" {
		t.Errorf("without a CRL: %v", vc)
	}
}
