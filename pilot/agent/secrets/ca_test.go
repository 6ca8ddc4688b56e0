package secrets_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/secrets"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/ca"
)

// TestFirstIssuance: from the real CA, "default" is a chain for our key and
// identity that the standard library and openssl verify up to the CA's
// root, ROOTCA is that root, OUTPUT_CERTS holds the same files, and nothing
// secret is logged.
func TestFirstIssuance(t *testing.T) {
	srv := startCA(t, "")
	root := srv.Authority().Bundle().RootPEM
	for _, keyType := range []string{"ecdsa", "rsa"} {
		t.Run(keyType, func(t *testing.T) {
			w := newWorkload(t, srv, "first-"+keyType, "productpage")
			logs := &bootstraptest.LogBuffer{}
			reg := prometheus.NewRegistry()
			out := filepath.Join(t.TempDir(), "out")
			o := w.options(t, srv.SecureGRPCListenAddr(), logs)
			o.KeyType, o.OutputDir, o.Metrics = keyType, out, reg
			m, err := secrets.New(o)
			if err != nil {
				t.Fatal(err)
			}
			if m.Ready() {
				t.Fatal("Ready before any certificate")
			}
			run(t, m)
			it := get(t, m, secrets.WorkloadName)
			rootItem := get(t, m, secrets.RootName)

			if it.Name != secrets.WorkloadName || rootItem.Name != secrets.RootName {
				t.Fatalf("names %q, %q", it.Name, rootItem.Name)
			}
			if !samePEM(t, rootItem.RootPEM, root) || !samePEM(t, it.RootPEM, root) {
				t.Fatal("ROOTCA / default's root is not the CA's root")
			}
			if len(rootItem.CertChainPEM) != 0 || len(rootItem.PrivateKeyPEM) != 0 || !rootItem.NotAfter.IsZero() {
				t.Fatal("ROOTCA carries workload material")
			}
			chain := certs(t, it.CertChainPEM)
			leaf := chain[0]
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(root)
			inter := x509.NewCertPool()
			for _, c := range chain[1:] {
				inter.AddCert(c)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Fatalf("chain does not verify: %v", err)
			}
			for _, c := range chain {
				if bytes.Equal(c.Raw, certs(t, root)[0].Raw) {
					t.Fatal("CertChainPEM holds the root; want leaf and intermediates")
				}
			}
			if len(leaf.URIs) != 1 || leaf.URIs[0].String() != w.identity {
				t.Fatalf("leaf URI SANs %v, want [%s]", leaf.URIs, w.identity)
			}
			if !it.NotBefore.Equal(leaf.NotBefore) || !it.NotAfter.Equal(leaf.NotAfter) {
				t.Fatal("NotBefore/NotAfter are not the leaf's")
			}
			if life := time.Until(it.NotAfter); life < 23*time.Hour || life > 25*time.Hour {
				t.Fatalf("leaf valid for %v more, want the default SECRET_TTL of 24h", life)
			}
			if _, err := tls.X509KeyPair(it.CertChainPEM, it.PrivateKeyPEM); err != nil {
				t.Fatalf("key does not match the certificate: %v", err)
			}
			wantKey := map[string]string{"ecdsa": "EC PRIVATE KEY", "rsa": "RSA PRIVATE KEY"}[keyType]
			if b, _ := pem.Decode(it.PrivateKeyPEM); b == nil || b.Type != wantKey {
				t.Fatalf("key PEM type, want %s", wantKey)
			}
			if !m.Ready() {
				t.Fatal("not Ready with a certificate")
			}

			// openssl agrees.
			dir := t.TempDir()
			rootFile, chainFile, leafFile := filepath.Join(dir, "root.pem"), filepath.Join(dir, "chain.pem"), filepath.Join(dir, "leaf.pem")
			writeFile(t, rootFile, root)
			writeFile(t, chainFile, it.CertChainPEM)
			writeFile(t, leafFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}))
			if o := openssl(t, "verify", "-CAfile", rootFile, "-untrusted", chainFile, leafFile); !strings.Contains(o, ": OK") {
				t.Fatalf("openssl verify: %s", o)
			}
			if o := openssl(t, "x509", "-in", leafFile, "-noout", "-ext", "subjectAltName"); !strings.Contains(o, "URI:"+w.identity) {
				t.Fatalf("openssl SAN: %s", o)
			}

			checkOutput(t, out, it)
			if got := metricValue(t, reg, "num_outgoing_requests"); got != 1 {
				t.Fatalf("num_outgoing_requests = %v, want 1", got)
			}
			if got := metricValue(t, reg, "cert_expiry_seconds"); got < float64(23*3600) {
				t.Fatalf("cert_expiry_seconds = %v", got)
			}
			assertNoSecrets(t, logs.String(), []string{w.token}, it)
		})
	}
}

// TestRotation: with a 4 s TTL and grace ratio 0.5 a new certificate is
// issued, and announced, before the old one expires; OUTPUT_CERTS follows.
func TestRotation(t *testing.T) {
	srv := startCA(t, "")
	w := newWorkload(t, srv, "rotation", "reviews")
	logs := &bootstraptest.LogBuffer{}
	out := t.TempDir()
	o := w.options(t, srv.SecureGRPCListenAddr(), logs)
	o.TTL, o.GraceRatio, o.OutputDir = 4*time.Second, 0.5, out
	m, err := secrets.New(o)
	if err != nil {
		t.Fatal(err)
	}
	sub := m.Subscribe()
	defer m.Unsubscribe(sub)
	run(t, m)

	next(t, sub, secrets.WorkloadName)
	first := get(t, m, secrets.WorkloadName)
	if life := first.NotAfter.Sub(time.Now()); life > 5*time.Second {
		t.Fatalf("first certificate valid for %v, asked for 4s", life)
	}
	var second *secrets.Item
	for second == nil {
		at := next(t, sub, secrets.WorkloadName)
		it := get(t, m, secrets.WorkloadName)
		if serial(t, it) == serial(t, first) {
			continue
		}
		if !at.Before(first.NotAfter) {
			t.Fatalf("new certificate announced at %v, after the old one expired at %v", at, first.NotAfter)
		}
		second = it
	}
	if bytes.Equal(second.PrivateKeyPEM, first.PrivateKeyPEM) {
		t.Fatal("rotation kept the key; want a new key per certificate")
	}
	checkOutput(t, out, second)
	assertNoSecrets(t, logs.String(), []string{w.token}, first, second)
}

// TestTokenRotation: the token file is read on every call. A garbage token
// makes the renewal fail and retry while the old certificate is still
// served; a new valid token makes it recover.
func TestTokenRotation(t *testing.T) {
	srv := startCA(t, "")
	w := newWorkload(t, srv, "token-rotation", "ratings")
	logs := &bootstraptest.LogBuffer{}
	reg := prometheus.NewRegistry()
	o := w.options(t, srv.SecureGRPCListenAddr(), logs)
	o.TTL, o.Metrics = 6*time.Second, reg
	m, err := secrets.New(o)
	if err != nil {
		t.Fatal(err)
	}
	sub := m.Subscribe()
	defer m.Unsubscribe(sub)
	run(t, m)
	next(t, sub, secrets.WorkloadName)
	first := get(t, m, secrets.WorkloadName)

	garbage := "garbage-token-" + strings.Repeat("x", 20)
	writeFile(t, w.tokenFile, []byte(garbage))
	waitFor(t, "two failed renewals", func() bool { return metricValue(t, reg, "num_failed_outgoing_requests") >= 2 })
	if got := get(t, m, secrets.WorkloadName); serial(t, got) != serial(t, first) {
		t.Fatal("the certificate changed although every renewal failed")
	}
	if !m.Ready() && time.Now().Before(first.NotAfter) {
		t.Fatal("not Ready while the old certificate is valid")
	}
	if !strings.Contains(logs.String(), "workload certificate request failed") {
		t.Fatal("the failures are not logged")
	}

	fresh := env.ServiceAccountToken(t, w.ns, w.sa, "istio-ca")
	writeFile(t, w.tokenFile, []byte(fresh+"\n"))
	for {
		next(t, sub, secrets.WorkloadName)
		if serial(t, get(t, m, secrets.WorkloadName)) != serial(t, first) {
			break
		}
	}
	if !m.Ready() {
		t.Fatal("not Ready after recovering")
	}
	assertNoSecrets(t, logs.String(), []string{w.token, fresh, garbage}, first, get(t, m, secrets.WorkloadName))
}

// TestCAUnreachableAtStart: the Manager starts before the CA; it retries
// (connection refused, then a root file that does not verify the server)
// and succeeds once the CA is up and the root file right.
func TestCAUnreachableAtStart(t *testing.T) {
	addr := testutil.FreeAddr(t)
	w := newWorkload(t, nil, "late-ca", "details")
	other, err := ca.NewSelfSigned(ca.SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, w.rootFile, other.RootPEM) // not the CA's root
	logs := &bootstraptest.LogBuffer{}
	reg := prometheus.NewRegistry()
	o := w.options(t, addr, logs)
	o.Metrics = reg
	m, err := secrets.New(o)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	waitFor(t, "three failed requests to the absent CA", func() bool { return metricValue(t, reg, "num_failed_outgoing_requests") >= 3 })
	if m.Ready() {
		t.Fatal("Ready without a certificate")
	}

	srv := startCA(t, addr)
	before := metricValue(t, reg, "num_failed_outgoing_requests")
	waitFor(t, "a failed request to the CA with the wrong root", func() bool { return metricValue(t, reg, "num_failed_outgoing_requests") > before })
	writeFile(t, w.rootFile, srv.Authority().Bundle().RootPEM)
	it := get(t, m, secrets.WorkloadName)
	if !samePEM(t, it.RootPEM, srv.Authority().Bundle().RootPEM) {
		t.Fatal("root is not the CA's")
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Fatalf("the refused connections are not logged:\n%s", logs.String())
	}
	assertNoSecrets(t, logs.String(), []string{w.token}, it)
}

// checkOutput checks OUTPUT_CERTS in dir against it: contents, the key's
// mode 0600, and no temporary file left behind.
func checkOutput(t *testing.T, dir string, it *secrets.Item) {
	t.Helper()
	for name, want := range map[string][]byte{"key.pem": it.PrivateKeyPEM, "cert-chain.pem": it.CertChainPEM, "root-cert.pem": it.RootPEM} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("OUTPUT_CERTS: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("OUTPUT_CERTS %s differs from the item", name)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key.pem mode %v, want 0600", st.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("OUTPUT_CERTS holds %v; want exactly the three files (no temporary file left)", names)
	}
}

// assertNoSecrets fails if log holds a token, a private key or any line of
// an item's key.
func assertNoSecrets(t *testing.T, log string, tokens []string, items ...*secrets.Item) {
	t.Helper()
	if log == "" {
		t.Fatal("empty log: the test does not capture the Manager's log")
	}
	for _, tok := range tokens {
		if strings.Contains(log, tok) {
			t.Fatal("the log holds a token")
		}
	}
	if strings.Contains(log, "PRIVATE KEY") {
		t.Fatal("the log holds a PEM private key")
	}
	for _, it := range items {
		for _, line := range strings.Split(string(it.PrivateKeyPEM), "\n") {
			if len(line) > 16 && !strings.HasPrefix(line, "-----") && strings.Contains(log, line) {
				t.Fatal("the log holds part of a private key")
			}
		}
	}
}

// samePEM reports whether a and b hold the same certificates.
func samePEM(t *testing.T, a, b []byte) bool {
	t.Helper()
	ca, cb := certs(t, a), certs(t, b)
	if len(ca) != len(cb) {
		return false
	}
	for i := range ca {
		if !bytes.Equal(ca[i].Raw, cb[i].Raw) {
			return false
		}
	}
	return true
}

// metricValue returns the value of the one series of metric name in reg
// (0 when absent).
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}
