package ca

import (
	"crypto/x509"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSelfSignedSignVerifiesWithOpenSSL(t *testing.T) {
	for _, kt := range []KeyType{KeyECDSA, KeyRSA} {
		t.Run(string(kt), func(t *testing.T) {
			b, err := NewSelfSigned(SelfSignedOptions{KeyType: kt, Org: "example.org"})
			if err != nil {
				t.Fatalf("NewSelfSigned: %v", err)
			}
			root := b.Cert
			if !root.IsCA || root.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign|x509.KeyUsageDigitalSignature ||
				len(root.SubjectKeyId) == 0 || root.Subject.CommonName != "" || !slices.Equal(root.Subject.Organization, []string{"example.org"}) {
				t.Errorf("root = IsCA %v KeyUsage %v SKI %x subject %v", root.IsCA, root.KeyUsage, root.SubjectKeyId, root.Subject)
			}
			if got := root.NotAfter.Sub(root.NotBefore); got < 10*365*24*time.Hour || got > 10*365*24*time.Hour+2*time.Minute {
				t.Errorf("root validity = %v, want 10y + 1m", got)
			}
			if root.SerialNumber.BitLen() > 128 || root.SerialNumber.Sign() <= 0 {
				t.Errorf("root serial %v is not a positive 128-bit number", root.SerialNumber)
			}
			// The PEM round-trips through ParseBundle in self-signed mode.
			again, err := ParseBundle(b.CertPEM, b.KeyPEM, nil, nil)
			if err != nil {
				t.Fatalf("ParseBundle(self-signed PEM): %v", err)
			}
			if len(again.Chain) != 0 || len(again.Roots) != 1 || !again.Roots[0].Equal(root) {
				t.Errorf("ParseBundle self-signed: chain %d roots %d", len(again.Chain), len(again.Roots))
			}

			p := DefaultPolicy()
			a := NewAuthority(b, p)
			ttl := 6 * time.Hour
			chain, err := a.Sign(mustCSR(t), testID, ttl)
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			if len(chain) != 2 {
				t.Fatalf("chain has %d certificates, want leaf and root", len(chain))
			}
			certs := parsePEMChain(t, chain)
			leaf := certs[0]
			if !certs[1].Equal(root) {
				t.Errorf("chain[1] is not the root")
			}
			checkLeaf(t, leaf, ttl+p.Backdate)
			if err := leaf.CheckSignatureFrom(root); err != nil {
				t.Errorf("leaf not signed by root: %v", err)
			}
			if string(leaf.AuthorityKeyId) != string(root.SubjectKeyId) {
				t.Errorf("leaf AKI %x, want root SKI %x", leaf.AuthorityKeyId, root.SubjectKeyId)
			}
			out, err := opensslVerify(t, b.RootPEM, chain)
			if err != nil || !strings.Contains(out, ": OK") {
				t.Fatalf("openssl verify: %v\n%s", err, out)
			}
			if text := opensslText(t, chain[0]); !strings.Contains(text, "URI:"+testID) {
				t.Errorf("openssl x509 -text lacks URI:%s:\n%s", testID, text)
			}
		})
	}
}

// checkLeaf asserts the workload-certificate profile.
func checkLeaf(t *testing.T, leaf *x509.Certificate, validity time.Duration) {
	t.Helper()
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got < validity-2*time.Second || got > validity+2*time.Second {
		t.Errorf("leaf validity = %v, want %v ±2s", got, validity)
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		t.Errorf("leaf ExtKeyUsage = %v, want ServerAuth and ClientAuth", leaf.ExtKeyUsage)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment {
		t.Errorf("leaf KeyUsage = %v", leaf.KeyUsage)
	}
	if leaf.IsCA || len(leaf.Subject.Names) != 0 {
		t.Errorf("leaf IsCA %v subject %v, want not a CA and an empty subject", leaf.IsCA, leaf.Subject)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != testID || len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
		t.Errorf("leaf SANs: URIs %v DNS %v", leaf.URIs, leaf.DNSNames)
	}
	sanCritical := false
	for _, e := range leaf.Extensions {
		if e.Id.String() == "2.5.29.17" {
			sanCritical = e.Critical
		}
	}
	if !sanCritical {
		t.Errorf("leaf SAN extension is not critical")
	}
	if leaf.SerialNumber.BitLen() > 128 || leaf.SerialNumber.Sign() <= 0 {
		t.Errorf("leaf serial %v is not a positive 128-bit number", leaf.SerialNumber)
	}
}

func TestSignTTL(t *testing.T) {
	b, err := NewSelfSigned(SelfSignedOptions{TTL: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := DefaultPolicy()
	a := NewAuthority(b, p)
	csr := mustCSR(t)
	for _, ttl := range []time.Duration{p.MaxTTL + time.Second, -time.Second} {
		if _, err := a.Sign(csr, testID, ttl); !errors.Is(err, ErrTTL) {
			t.Errorf("Sign(ttl %v) = %v, want ErrTTL", ttl, err)
		}
	}
	// ttl 0 is the default TTL.
	chain, err := a.Sign(csr, testID, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkLeaf(t, parsePEMChain(t, chain)[0], p.DefaultTTL+p.Backdate)
	// NotAfter never outlives the signer.
	chain, err = a.Sign(csr, testID, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if leaf := parsePEMChain(t, chain)[0]; !leaf.NotAfter.Equal(b.Cert.NotAfter) {
		t.Errorf("leaf NotAfter %v, want capped at the CA's %v", leaf.NotAfter, b.Cert.NotAfter)
	}
	if _, err := a.Sign(csr, "https://example.com/x", 0); !errors.Is(err, ErrIdentity) {
		t.Errorf("Sign(non-SPIFFE identity) = %v, want ErrIdentity", err)
	}
}

func TestIssueServing(t *testing.T) {
	root, err := NewSelfSigned(SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, chainPEM := intermediate(t, root)
	b, err := ParseBundle(certPEM, keyPEM, chainPEM, root.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuthority(b, DefaultPolicy())
	names := []string{"istiod.istio-system.svc", "istiod.istio-system.svc.cluster.local"}
	tc, err := a.IssueServing(names, time.Hour)
	if err != nil {
		t.Fatalf("IssueServing: %v", err)
	}
	if len(tc.Certificate) != 2 || tc.Leaf == nil {
		t.Fatalf("tls.Certificate has %d certificates (want leaf + intermediate) and Leaf %v", len(tc.Certificate), tc.Leaf != nil)
	}
	inter := x509.NewCertPool()
	inter.AddCert(b.Cert)
	if _, err := tc.Leaf.Verify(x509.VerifyOptions{Roots: b.RootPool(), Intermediates: inter, DNSName: names[1],
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate does not verify: %v", err)
	}
	if _, err := tc.Leaf.Verify(x509.VerifyOptions{Roots: b.RootPool(), Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("serving certificate is not good for client auth: %v", err)
	}
}

func TestSetBundleNotifiesWithoutBlocking(t *testing.T) {
	b1, err := NewSelfSigned(SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := NewSelfSigned(SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuthority(b1, Policy{})
	if a.Policy() != DefaultPolicy() {
		t.Errorf("zero Policy = %+v, want the defaults", a.Policy())
	}
	ch := a.Subscribe()
	a.SetBundle(b2) // nobody reads: must not block
	a.SetBundle(b2)
	<-ch
	select {
	case <-ch:
		t.Errorf("two SetBundle calls gave two notifications, want one coalesced")
	default:
	}
	if a.Bundle() != b2 {
		t.Errorf("Bundle() is not the one set")
	}
}

func TestSignConcurrentWithSetBundle(t *testing.T) {
	b1, err := NewSelfSigned(SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := NewSelfSigned(SelfSignedOptions{KeyType: KeyRSA})
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuthority(b1, DefaultPolicy())
	csr := mustCSR(t)
	done := make(chan error, 4)
	for range 4 {
		go func() {
			for range 20 {
				chain, err := a.Sign(csr, testID, 0)
				if err != nil {
					done <- err
					return
				}
				certs := parsePEMChain(t, chain)
				if err := certs[0].CheckSignatureFrom(certs[len(certs)-1]); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for i := range 20 {
		a.SetBundle([]*Bundle{b1, b2}[i%2])
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Errorf("Sign during SetBundle: %v (leaf and root must come from one bundle)", err)
		}
	}
}

func TestParseKeyType(t *testing.T) {
	for in, want := range map[string]KeyType{"": KeyECDSA, "ECDSA": KeyECDSA, "ec": KeyECDSA, "RSA": KeyRSA} {
		if got, err := ParseKeyType(in); err != nil || got != want {
			t.Errorf("ParseKeyType(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseKeyType("dsa"); err == nil || !strings.Contains(err.Error(), `"dsa"`) {
		t.Errorf("ParseKeyType(dsa) error = %v, want one naming the value", err)
	}
}
