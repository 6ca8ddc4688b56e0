package ca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const testID = "spiffe://cluster.local/ns/default/sa/bookinfo-productpage"

// newKey makes an ECDSA P-256 key for a test CSR.
func newKey(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// csrDER makes a CSR signed by key with the given SANs.
func csrDER(t testing.TB, key crypto.Signer, uris []string, dns []string) []byte {
	t.Helper()
	tmpl := &x509.CertificateRequest{DNSNames: dns}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatalf("CreateCertificateRequest: %v", err)
	}
	return der
}

func csrPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// mustCSR makes and parses a CSR for testID.
func mustCSR(t testing.TB) *x509.CertificateRequest {
	t.Helper()
	csr, err := ParseCSR(csrPEM(csrDER(t, newKey(t), []string{testID}, nil)))
	if err != nil {
		t.Fatalf("ParseCSR: %v", err)
	}
	return csr
}

// intermediate makes a CA signed by root, in the plug-in layout Istio's
// docs produce: ca-cert = intermediate, cert-chain = intermediate + root.
// The key is written as SEC 1 "EC PRIVATE KEY", as openssl does.
func intermediate(t testing.TB, root *Bundle) (certPEM, keyPEM, chainPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := randomSerial()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"Istio"}, CommonName: "Intermediate CA " + serial.Text(16), Locality: []string{"cluster1"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(2 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.Cert, key.Public(), root.Key)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})
	chainPEM = append(append([]byte(nil), certPEM...), root.CertPEM...)
	return certPEM, keyPEM, chainPEM
}

// writePlugin writes the four plug-in files into dir the way a real update
// does: each to a temporary name, then renamed into place.
func writePlugin(t testing.TB, dir string, certPEM, keyPEM, chainPEM, rootPEM []byte) {
	t.Helper()
	for _, f := range []struct {
		name string
		data []byte
	}{{RootCertFile, rootPEM}, {CertChainFile, chainPEM}, {CACertFile, certPEM}, {CAKeyFile, keyPEM}} {
		replaceFile(t, filepath.Join(dir, f.name), f.data)
	}
}

func replaceFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// opensslVerify runs `openssl verify` on the PEM chain (leaf, intermediates,
// root) against rootPEM and returns its combined output and error.
func opensslVerify(t *testing.T, rootPEM []byte, chain []string) (string, error) {
	t.Helper()
	openssl := requireOpenSSL(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	args := []string{"verify", "-CAfile", write("root.pem", rootPEM)}
	if inter := chain[1 : len(chain)-1]; len(inter) > 0 {
		args = append(args, "-untrusted", write("intermediates.pem", []byte(strings.Join(inter, ""))))
	}
	args = append(args, write("leaf.pem", []byte(chain[0])))
	out, err := exec.Command(openssl, args...).CombinedOutput()
	return string(out), err
}

// opensslText is `openssl x509 -noout -text` of one PEM certificate.
func opensslText(t *testing.T, certPEM string) string {
	t.Helper()
	cmd := exec.Command(requireOpenSSL(t), "x509", "-noout", "-text")
	cmd.Stdin = strings.NewReader(certPEM)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openssl x509: %v\n%s", err, out)
	}
	return string(out)
}

func requireOpenSSL(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl not found (%v): install it, e.g. `apt-get install openssl` or `brew install openssl`", err)
	}
	return p
}

// parsePEMChain parses each PEM string of a Sign result.
func parsePEMChain(t testing.TB, chain []string) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for i, s := range chain {
		block, rest := pem.Decode([]byte(s))
		if block == nil || len(bytes.TrimSpace(rest)) > 0 {
			t.Fatalf("chain[%d] is not exactly one PEM block", i)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("chain[%d]: %v", i, err)
		}
		out = append(out, c)
	}
	return out
}

// logSink is a slog handler's writer that hands each line to a channel.
type logSink struct {
	mu    sync.Mutex
	lines chan string
}

func newLogger() (*slog.Logger, *logSink) {
	s := &logSink{lines: make(chan string, 256)}
	return slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug})), s
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.lines <- string(p):
	default:
	}
	return len(p), nil
}

// waitLine waits for a log line containing all of parts.
func (s *logSink) waitLine(t *testing.T, timeout time.Duration, parts ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		select {
		case l := <-s.lines:
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(l, p)
			}
			if ok {
				return l
			}
		case <-ctx.Done():
			t.Fatalf("no log line containing %q within %v", parts, timeout)
		}
	}
}
