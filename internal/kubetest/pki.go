package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the key material one test environment writes into its directory.
type pki struct {
	caPEM      []byte // CA that signed the API server's serving certificate
	servingCrt string // paths of files the API server reads
	servingKey string
	saPub      string
	saKey      string
	tokens     string
	adminToken string
}

// writePKI generates a CA, a serving certificate for loopback and the
// in-cluster names, a service-account signing key pair and a static token file
// with one admin (group system:masters), all under dir.
func writePKI(dir string) (*pki, error) {
	p := &pki{
		servingCrt: filepath.Join(dir, "serving.crt"),
		servingKey: filepath.Join(dir, "serving.key"),
		saPub:      filepath.Join(dir, "sa.pub"),
		saKey:      filepath.Join(dir, "sa.key"),
		tokens:     filepath.Join(dir, "tokens.csv"),
	}
	if err := p.writeServing(); err != nil {
		return nil, err
	}
	if err := p.writeServiceAccountKey(); err != nil {
		return nil, err
	}
	if err := p.writeTokens(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) writeServing() error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("kubetest: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "meshpilot-kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("kubetest: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("kubetest: CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("kubetest: serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 96, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("kubetest: serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("kubetest: serving key: %w", err)
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	crt := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), p.caPEM...)
	if err := writeFile(p.servingCrt, crt); err != nil {
		return err
	}
	return writeFile(p.servingKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}

func (p *pki) writeServiceAccountKey() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("kubetest: service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("kubetest: service-account public key: %w", err)
	}
	if err := writeFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})); err != nil {
		return err
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return writeFile(p.saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}))
}

func (p *pki) writeTokens() error {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("kubetest: admin token: %w", err)
	}
	p.adminToken = hex.EncodeToString(b)
	// token,user,uid,"group1,group2"
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", p.adminToken, AdminUser, AdminUser)
	return writeFile(p.tokens, []byte(line))
}

func writeFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("kubetest: write %s: %w", path, err)
	}
	return nil
}
