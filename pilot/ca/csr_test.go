package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
)

func TestParseCSRAccepts(t *testing.T) {
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for name, der := range map[string][]byte{
		"P-256":   csrDER(t, newKey(t), []string{testID}, nil),
		"P-384":   csrDER(t, p384, []string{testID}, nil),
		"Ed25519": csrDER(t, ed, []string{testID}, nil),
		"RSA2048": csrDER(t, rsa2048, []string{testID}, nil),
	} {
		in := append([]byte("\n  "), csrPEM(der)...)
		csr, err := ParseCSR(append(in, "\n\n"...))
		if err != nil {
			t.Errorf("%s: ParseCSR: %v", name, err)
			continue
		}
		if err := CheckIdentity(csr, testID); err != nil {
			t.Errorf("%s: CheckIdentity: %v", name, err)
		}
	}
}

func TestParseCSRRefuses(t *testing.T) {
	valid := csrDER(t, newKey(t), []string{testID}, nil)
	badSig := bytes.Clone(valid)
	badSig[len(badSig)-3] ^= 0xff
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	root, err := NewSelfSigned(SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	huge := append(csrPEM(valid), bytes.Repeat([]byte(" "), MaxCSRSize)...)
	headers := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Headers: map[string]string{"X": "y"}, Bytes: valid})
	cases := map[string]struct {
		in     []byte
		reason string
	}{
		"garbage":          {[]byte("this is not a certificate request at all"), "not PEM"},
		"empty":            {nil, "empty"},
		"two blocks":       {append(csrPEM(valid), csrPEM(valid)...), "data after"},
		"trailing text":    {append(csrPEM(valid), "junk"...), "data after"},
		"leading text":     {append([]byte("junk\n"), csrPEM(valid)...), "not PEM"},
		"certificate":      {root.CertPEM, "not CERTIFICATE REQUEST"},
		"bad signature":    {csrPEM(badSig), "signature"},
		"RSA-1024":         {csrPEM(csrDER(t, rsa1024, []string{testID}, nil)), "1024 bits"},
		"P-224":            {csrPEM(csrDER(t, p224, []string{testID}, nil)), "P-224"},
		"over 64KiB":       {huge, "larger than"},
		"malformed DER":    {pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{0x30, 0x03, 1, 2, 3}}), "malformed"},
		"PEM with headers": {headers, "headers"},
	}
	for name, c := range cases {
		_, err := ParseCSR(c.in)
		if !errors.Is(err, ErrInvalidCSR) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: ParseCSR error = %v, want ErrInvalidCSR saying %q", name, err, c.reason)
		}
		if err != nil && len(c.in) > 20 && strings.Contains(err.Error(), string(c.in[len(c.in)/2:len(c.in)/2+8])) {
			t.Errorf("%s: error echoes the input: %v", name, err)
		}
	}
}

func TestCheckIdentityRefuses(t *testing.T) {
	other := "spiffe://cluster.local/ns/default/sa/reviews"
	cases := map[string]struct {
		uris, dns []string
		reason    string
	}{
		"wrong URI": {[]string{other}, nil, other},
		"two URIs":  {[]string{testID, other}, nil, other},
		"URI + DNS": {[]string{testID}, []string{"productpage.default.svc"}, "1 DNS"},
		"no SAN":    {nil, nil, "[]"},
		"DNS only":  {nil, []string{"x.example.com"}, "1 DNS"},
	}
	for name, c := range cases {
		csr, err := x509.ParseCertificateRequest(csrDER(t, newKey(t), c.uris, c.dns))
		if err != nil {
			t.Fatal(err)
		}
		err = CheckIdentity(csr, testID)
		if !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), c.reason) || !strings.Contains(err.Error(), testID) {
			t.Errorf("%s: CheckIdentity = %v, want ErrIdentity naming %q and the allowed %s", name, err, c.reason, testID)
		}
	}
	csr, err := x509.ParseCertificateRequest(csrDER(t, newKey(t), []string{testID}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckIdentity(csr, ""); !errors.Is(err, ErrIdentity) {
		t.Errorf("CheckIdentity(want empty) = %v, want ErrIdentity", err)
	}
}
