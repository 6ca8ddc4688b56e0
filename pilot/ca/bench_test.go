package ca

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"testing"
)

// BenchmarkSign measures Authority.Sign of a pre-parsed CSR with ECDSA
// P-256 and RSA 2048 CA keys; BenchmarkRawSign is the raw signing speed of
// the same kind of key, the floor for Sign.
func BenchmarkSign(b *testing.B) {
	for _, kt := range []KeyType{KeyECDSA, KeyRSA} {
		b.Run(string(kt), func(b *testing.B) {
			bundle, err := NewSelfSigned(SelfSignedOptions{KeyType: kt})
			if err != nil {
				b.Fatal(err)
			}
			a := NewAuthority(bundle, DefaultPolicy())
			csr := mustCSR(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Sign(csr, testID, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signs/s")
		})
	}
}

func BenchmarkRawSign(b *testing.B) {
	for _, kt := range []KeyType{KeyECDSA, KeyRSA} {
		b.Run(string(kt), func(b *testing.B) {
			bundle, err := NewSelfSigned(SelfSignedOptions{KeyType: kt})
			if err != nil {
				b.Fatal(err)
			}
			digest := sha256.Sum256([]byte("a to-be-signed certificate"))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bundle.Key.Sign(rand.Reader, digest[:], crypto.SHA256); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signs/s")
		})
	}
}

func BenchmarkParseCSR(b *testing.B) {
	in := csrPEM(csrDER(b, newKey(b), []string{testID}, nil))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseCSR(in); err != nil {
			b.Fatal(err)
		}
	}
}
