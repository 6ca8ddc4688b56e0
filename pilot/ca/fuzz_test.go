package ca

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"testing"
)

// FuzzParseCSR: ParseCSR never panics, and anything it accepts carries a
// valid self-signature.
func FuzzParseCSR(f *testing.F) {
	valid := csrPEM(csrDER(f, newKey(f), []string{testID}, nil))
	f.Add(valid)
	f.Add([]byte("garbage"))
	f.Add([]byte{})
	f.Add(append(append([]byte(nil), valid...), valid...))
	f.Fuzz(func(t *testing.T, in []byte) {
		csr, err := ParseCSR(in)
		if err != nil {
			return
		}
		if err := csr.CheckSignature(); err != nil {
			t.Fatalf("accepted a CSR whose signature does not verify: %v", err)
		}
	})
}

// FuzzParsePEMBundle: ParseBundle never panics, and an accepted bundle's
// key signs for its certificate, which verifies against its roots.
func FuzzParsePEMBundle(f *testing.F) {
	root, err := NewSelfSigned(SelfSignedOptions{})
	if err != nil {
		f.Fatal(err)
	}
	cert, key, chain := intermediate(f, root)
	f.Add(root.CertPEM, root.KeyPEM, []byte(nil), []byte(nil))
	f.Add(cert, key, chain, root.CertPEM)
	f.Add(cert, key, []byte(nil), root.CertPEM)
	f.Add(cert, root.KeyPEM, chain, root.CertPEM)
	f.Add([]byte("x"), []byte("y"), []byte("z"), []byte("w"))
	f.Fuzz(func(t *testing.T, certPEM, keyPEM, chainPEM, rootPEM []byte) {
		b, err := ParseBundle(certPEM, keyPEM, chainPEM, rootPEM)
		if err != nil {
			return
		}
		if len(b.Roots) == 0 || b.Cert == nil || b.Key == nil {
			t.Fatalf("accepted bundle lacks a cert, key or root")
		}
		digest := sha256.Sum256([]byte("probe"))
		if _, err := b.Key.Sign(rand.Reader, digest[:], crypto.SHA256); err != nil {
			t.Fatalf("accepted key cannot sign: %v", err)
		}
		s := newSigner(b)
		if last := s.intermediates; len(last) > 0 {
			if err := last[len(last)-1].CheckSignatureFrom(b.Roots[0]); err != nil {
				t.Fatalf("Roots[0] does not sign the chain: %v", err)
			}
		}
	})
}
