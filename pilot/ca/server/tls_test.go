package server

import (
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pilot/ca"
)

// TestServingCertRenewal: the secure port's and the webhook's certificate
// is kept until half its lifetime, then reissued on the next handshake,
// and reissued at once when the CA's bundle changes (a new root); each
// verifies against the root in force, with the names and IP SANs asked for.
func TestServingCertRenewal(t *testing.T) {
	bundle, err := ca.NewSelfSigned(ca.SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := ca.NewAuthority(bundle, ca.DefaultPolicy())
	names := []string{"istiod.istio-system.svc", "127.0.0.1"}
	c, err := NewServingCert(a, names, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c.now = func() time.Time { return now }

	first, err := c.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, first.Leaf, bundle, "istiod.istio-system.svc")
	if len(first.Leaf.IPAddresses) != 1 || !first.Leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("IP SANs %v, want 127.0.0.1", first.Leaf.IPAddresses)
	}

	life := first.Leaf.NotAfter.Sub(first.Leaf.NotBefore)
	now = first.Leaf.NotBefore.Add(life/2 - time.Minute)
	if again, _ := c.GetCertificate(nil); again.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
		t.Fatal("certificate reissued before half its lifetime")
	}
	now = first.Leaf.NotBefore.Add(life/2 + time.Minute)
	renewed, err := c.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatal("certificate not reissued after half its lifetime")
	}

	rotated, err := ca.NewSelfSigned(ca.SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.SetBundle(rotated)
	after, err := c.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, after.Leaf, rotated, "istiod.istio-system.svc")
}

func verify(t *testing.T, leaf *x509.Certificate, b *ca.Bundle, name string) {
	t.Helper()
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: b.RootPool(), DNSName: name}); err != nil {
		t.Errorf("serving certificate does not verify for %s: %v", name, err)
	}
}
