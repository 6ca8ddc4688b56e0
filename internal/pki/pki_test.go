package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestParsePrivateKeyFormats(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	sec1, _ := x509.MarshalECPrivateKey(ec)
	pkcs8, err := MarshalPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	params := pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8, 42, 134, 72, 206, 61, 3, 1, 7}})
	for _, tc := range []struct {
		name string
		pem  []byte
		want crypto.PublicKey
	}{
		{"PKCS#8", pkcs8, &ec.PublicKey},
		{"SEC 1 after EC PARAMETERS", append(params, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})...), &ec.PublicKey},
		{"PKCS#1", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)}), &rk.PublicKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := ParsePrivateKey(tc.pem)
			if err != nil {
				t.Fatal(err)
			}
			if !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(tc.want) {
				t.Fatal("parsed a different key")
			}
		})
	}
	for _, bad := range []string{"", "not pem", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("junk")}))} {
		if _, err := ParsePrivateKey([]byte(bad)); err == nil {
			t.Errorf("ParsePrivateKey(%.20q) accepted", bad)
		}
	}
}

func TestParseCertificatesIsStrict(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"}, NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	two := EncodeCertificates(cert, cert)
	got, err := ParseCertificates("two.pem", two)
	if err != nil || len(got) != 2 || !got[1].Equal(cert) {
		t.Fatalf("round trip of two certificates: %d, %v", len(got), err)
	}
	if got, err := ParseCertificates("empty.pem", nil); err != nil || len(got) != 0 {
		t.Fatalf("empty input: %v, %v", got, err)
	}
	keyPEM, _ := MarshalPrivateKey(key)
	for name, data := range map[string][]byte{
		"a key block":     append(EncodeCertificates(cert), keyPEM...),
		"trailing text":   append(EncodeCertificates(cert), []byte("garbage")...),
		"bad certificate": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}),
	} {
		_, err := ParseCertificates("f.pem", data)
		if err == nil || !strings.HasPrefix(err.Error(), "f.pem: ") {
			t.Errorf("%s: error %v, want one naming f.pem", name, err)
		}
	}
}
