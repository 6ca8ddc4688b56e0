package secrets_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshpilot/meshpilot/pilot/agent/secrets"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/ca"
)

// certSet is what a file-mounted directory holds.
type certSet struct{ chain, key, root []byte }

// signSet issues a certificate for id from authority a (a new self-signed
// CA when nil) with the CA's own Sign, as files would hold it.
func signSet(t *testing.T, a *ca.Authority, id string) certSet {
	t.Helper()
	if a == nil {
		b, err := ca.NewSelfSigned(ca.SelfSignedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a = ca.NewAuthority(b, ca.DefaultPolicy())
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(id)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := a.Sign(csr, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return certSet{
		chain: []byte(strings.Join(chain[:len(chain)-1], "")),
		key:   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		root:  []byte(chain[len(chain)-1]),
	}
}

// replace writes s into dir file by file, each by rename, key first: a
// reader may see the new key with the old chain in between.
func (s certSet) replace(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []struct {
		name string
		data []byte
	}{{"key.pem", s.key}, {"cert-chain.pem", s.chain}, {"root-cert.pem", s.root}} {
		tmp := filepath.Join(dir, "."+f.name+".new")
		writeFile(t, tmp, f.data)
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFileMounted: certificates in FileCertsDir are served as they are,
// the CA is never called, and replacing the files (in place, then as a
// Kubernetes Secret volume swaps its ..data link) notifies and serves the
// new ones; files that do not load keep the last good set.
func TestFileMounted(t *testing.T) {
	const id = "spiffe://cluster.local/ns/vm/sa/legacy"
	dir := t.TempDir()
	first := signSet(t, nil, id)
	first.replace(t, dir)
	never := newCountingListener(t)
	logs := &bootstraptest.LogBuffer{}
	reg := prometheus.NewRegistry()
	m, err := secrets.New(secrets.Options{
		CAAddress:    never.Addr().String(),
		CAServerName: istiodName,
		Identity:     id,
		FileCertsDir: dir,
		Metrics:      reg,
		Log:          bootstraptest.Logger(t, slog.LevelDebug, logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !m.FileMode() {
		t.Fatal("not in file-mounted mode with all three files present")
	}
	sub := m.Subscribe()
	defer m.Unsubscribe(sub)
	run(t, m)
	checkSet(t, m, first)
	if !m.Ready() {
		t.Fatal("not Ready with file-mounted certificates")
	}

	// Replaced in place, from another CA: both items change.
	second := signSet(t, nil, id)
	second.replace(t, dir)
	next(t, sub, secrets.RootName)
	waitFor(t, "the second certificate", func() bool {
		return bytes.Equal(get(t, m, secrets.WorkloadName).CertChainPEM, second.chain)
	})
	checkSet(t, m, second)

	// A key that is not the certificate's: logged, counted, last good kept.
	bad := second
	bad.key = signSet(t, nil, id).key
	failures := metricValue(t, reg, "num_file_secret_failures")
	bad.replace(t, dir)
	waitFor(t, "num_file_secret_failures to grow", func() bool { return metricValue(t, reg, "num_file_secret_failures") > failures })
	checkSet(t, m, second)

	// A Kubernetes Secret volume: files are links through ..data, which is
	// swapped to a new timestamped directory.
	kdir := t.TempDir()
	third := signSet(t, nil, id)
	writeVersion(t, kdir, "..2026_01", third)
	if err := os.Symlink("..2026_01", filepath.Join(kdir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"key.pem", "cert-chain.pem", "root-cert.pem"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(kdir, f)); err != nil {
			t.Fatal(err)
		}
	}
	km, err := secrets.New(secrets.Options{
		CAAddress: never.Addr().String(), Identity: id, FileCertsDir: kdir,
		Log: bootstraptest.Logger(t, slog.LevelDebug, logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	ksub := km.Subscribe()
	defer km.Unsubscribe(ksub)
	run(t, km)
	checkSet(t, km, third)
	fourth := signSet(t, nil, id)
	writeVersion(t, kdir, "..2026_02", fourth)
	if err := os.Symlink("..2026_02", filepath.Join(kdir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(kdir, "..data_tmp"), filepath.Join(kdir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the swapped certificate", func() bool {
		return bytes.Equal(get(t, km, secrets.WorkloadName).CertChainPEM, fourth.chain)
	})
	next(t, ksub, secrets.WorkloadName)
	checkSet(t, km, fourth)

	if n := never.count(); n != 0 {
		t.Fatalf("the CA address was dialled %d times in file-mounted mode", n)
	}
	if got := metricValue(t, reg, "num_outgoing_requests"); got != 0 {
		t.Fatalf("num_outgoing_requests = %v in file-mounted mode", got)
	}
	if strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Fatal("the log holds a private key")
	}
}

// writeVersion writes s into dir/name, a Secret volume's timestamped directory.
func writeVersion(t *testing.T, dir, name string, s certSet) {
	t.Helper()
	v := filepath.Join(dir, name)
	if err := os.Mkdir(v, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(v, "key.pem"), s.key)
	writeFile(t, filepath.Join(v, "cert-chain.pem"), s.chain)
	writeFile(t, filepath.Join(v, "root-cert.pem"), s.root)
}

// checkSet checks that m serves s byte for byte.
func checkSet(t *testing.T, m *secrets.Manager, s certSet) {
	t.Helper()
	it := get(t, m, secrets.WorkloadName)
	if !bytes.Equal(it.CertChainPEM, s.chain) || !bytes.Equal(it.PrivateKeyPEM, s.key) || !bytes.Equal(it.RootPEM, s.root) {
		t.Fatal("default is not the files' content")
	}
	if leaf := certs(t, s.chain)[0]; !it.NotAfter.Equal(leaf.NotAfter) {
		t.Fatal("NotAfter is not the leaf's")
	}
	if root := get(t, m, secrets.RootName); !bytes.Equal(root.RootPEM, s.root) {
		t.Fatal("ROOTCA is not root-cert.pem")
	}
}
