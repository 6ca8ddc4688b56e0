package ca

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/pki"
)

// pluginSet is one generation of plug-in CA files.
type pluginSet struct {
	root                       *Bundle
	cert, key, chain, rootCert []byte
}

func newPluginSet(t *testing.T) pluginSet {
	t.Helper()
	root, err := NewSelfSigned(SelfSignedOptions{KeyType: KeyRSA})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, chain := intermediate(t, root)
	return pluginSet{root: root, cert: cert, key: key, chain: chain, rootCert: root.CertPEM}
}

func TestPluginCASignAndReload(t *testing.T) {
	dir := t.TempDir()
	if PluginPresent(dir) {
		t.Fatalf("PluginPresent(empty dir) = true")
	}
	gen1 := newPluginSet(t)
	writePlugin(t, dir, gen1.cert, gen1.key, gen1.chain, gen1.rootCert)
	if !PluginPresent(dir) {
		t.Fatalf("PluginPresent = false after writing the files")
	}
	b, err := LoadPlugin(dir)
	if err != nil {
		t.Fatalf("LoadPlugin: %v", err)
	}
	if len(b.Chain) != 0 || len(b.Roots) != 1 || !b.Roots[0].Equal(gen1.root.Cert) {
		t.Fatalf("bundle: %d intermediates above ca-cert (want 0: cert-chain holds ca-cert and the root), %d roots", len(b.Chain), len(b.Roots))
	}
	if !bytes.Equal(b.CertPEM, gen1.cert) || !bytes.Equal(b.KeyPEM, gen1.key) || !bytes.Equal(b.ChainPEM, gen1.chain) || !bytes.Equal(b.RootPEM, gen1.rootCert) {
		t.Errorf("bundle PEM does not round-trip the files byte for byte")
	}
	a := NewAuthority(b, DefaultPolicy())
	chain, err := a.Sign(mustCSR(t), testID, time.Hour)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	certs := parsePEMChain(t, chain)
	if len(certs) != 3 || !certs[1].Equal(b.Cert) || !certs[2].Equal(gen1.root.Cert) {
		t.Fatalf("chain = %d certificates, want leaf, intermediate, root", len(certs))
	}
	checkLeaf(t, certs[0], time.Hour+DefaultPolicy().Backdate)
	if out, err := opensslVerify(t, gen1.rootCert, chain); err != nil || !strings.Contains(out, ": OK") {
		t.Fatalf("openssl verify through the intermediate: %v\n%s", err, out)
	}

	// Watch the directory.
	log, sink := newLogger()
	ctx, cancel := context.WithCancel(context.Background())
	watchDone := make(chan error, 1)
	go func() { watchDone <- WatchPlugin(ctx, dir, a, time.Hour, log) }()
	defer func() {
		cancel()
		if err := <-watchDone; err != nil {
			t.Errorf("WatchPlugin: %v", err)
		}
	}()
	sink.waitLine(t, 10*time.Second, "watching plug-in CA")
	if a.Bundle() != b {
		t.Fatalf("WatchPlugin replaced a bundle whose files did not change")
	}
	updates := a.Subscribe()

	// A rotation to a new root and intermediate.
	gen2 := newPluginSet(t)
	writePlugin(t, dir, gen2.cert, gen2.key, gen2.chain, gen2.rootCert)
	deadline := time.After(10 * time.Second)
	for !a.Bundle().Roots[0].Equal(gen2.root.Cert) {
		select {
		case <-updates:
		case <-deadline:
			t.Fatalf("bundle did not switch to the new root within 10s")
		}
	}
	chain, err = a.Sign(mustCSR(t), testID, time.Hour)
	if err != nil {
		t.Fatalf("Sign after reload: %v", err)
	}
	if out, err := opensslVerify(t, gen2.rootCert, chain); err != nil || !strings.Contains(out, ": OK") {
		t.Fatalf("openssl verify against the new root: %v\n%s", err, out)
	}
	if out, err := opensslVerify(t, gen1.rootCert, chain); err == nil || strings.Contains(out, ": OK") {
		t.Fatalf("certificate from the new CA verifies against the OLD root:\n%s", out)
	}

	// A broken key is logged and the bundle kept.
	current := a.Bundle()
	replaceFile(t, filepath.Join(dir, CAKeyFile), []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"))
	line := sink.waitLine(t, 10*time.Second, "plug-in CA not reloaded", CAKeyFile)
	if strings.Contains(line, "AAAA") {
		t.Errorf("log line echoes the key file: %s", line)
	}
	if a.Bundle() != current {
		t.Errorf("bundle changed after a broken ca-key.pem")
	}
	select {
	case <-updates:
		t.Errorf("SetBundle called for a broken ca-key.pem")
	default:
	}
}

func TestLoadPluginErrors(t *testing.T) {
	gen := newPluginSet(t)
	other := newPluginSet(t)
	selfSigned, err := NewSelfSigned(SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := NewSelfSigned(SelfSignedOptions{Now: time.Now().Add(-48 * time.Hour), TTL: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name                   string
		cert, key, chain, root []byte
		want                   string
	}{
		{"key mismatch", gen.cert, other.key, gen.chain, gen.rootCert, "ca-key.pem: does not match ca-cert.pem"},
		{"wrong root", gen.cert, gen.key, gen.chain, other.rootCert, "ca-cert.pem: does not chain to root-cert.pem"},
		{"garbage key", gen.cert, []byte("nope"), gen.chain, gen.rootCert, "ca-key.pem"},
		{"two certs in ca-cert", gen.chain, gen.key, nil, gen.rootCert, "ca-cert.pem: holds 2 certificates"},
		{"no root", gen.cert, gen.key, gen.cert, nil, "root-cert.pem: missing"},
		{"expired", expired.CertPEM, expired.KeyPEM, nil, nil, "expired"},
		{"key in root file", gen.cert, gen.key, gen.chain, gen.key, "root-cert.pem"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range map[string][]byte{CACertFile: c.cert, CAKeyFile: c.key, CertChainFile: c.chain, RootCertFile: c.root} {
				if data != nil {
					if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			_, err := LoadPlugin(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) {
				t.Errorf("LoadPlugin error = %v, want one naming %s and %q", err, dir, c.want)
			}
		})
	}
	// A non-CA certificate cannot sign.
	leafChain, err := NewAuthority(selfSigned, DefaultPolicy()).IssueServing([]string{"x"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leafPEM := pki.EncodeCertificates(leafChain.Leaf)
	if _, err := ParseBundle(leafPEM, selfSigned.KeyPEM, nil, selfSigned.CertPEM); err == nil || !strings.Contains(err.Error(), "ca-cert.pem: not a CA") {
		t.Errorf("ParseBundle(leaf as ca-cert) = %v, want not a CA", err)
	}
	if _, err := LoadPlugin(t.TempDir()); err == nil || !strings.Contains(err.Error(), CACertFile) {
		t.Errorf("LoadPlugin(empty dir) = %v, want an error naming %s", err, CACertFile)
	}
}

// TestWatchPluginSecretVolume updates the files the way the kubelet updates
// a Secret volume: the files are symlinks through ..data, and an update
// swaps the ..data symlink to a new timestamped directory.
func TestWatchPluginSecretVolume(t *testing.T) {
	dir := t.TempDir()
	writeGeneration := func(name string, s pluginSet) {
		gen := filepath.Join(dir, name)
		if err := os.Mkdir(gen, 0o700); err != nil {
			t.Fatal(err)
		}
		for f, data := range map[string][]byte{CACertFile: s.cert, CAKeyFile: s.key, CertChainFile: s.chain, RootCertFile: s.rootCert} {
			if err := os.WriteFile(filepath.Join(gen, f), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	gen1, gen2 := newPluginSet(t), newPluginSet(t)
	writeGeneration("..2026_01_01_00_00_00.1", gen1)
	for _, f := range []string{CACertFile, CAKeyFile, CertChainFile, RootCertFile} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := LoadPlugin(dir)
	if err != nil {
		t.Fatalf("LoadPlugin through symlinks: %v", err)
	}
	a := NewAuthority(b, DefaultPolicy())
	updates := a.Subscribe()
	log, sink := newLogger()
	ctx, cancel := context.WithCancel(context.Background())
	watchDone := make(chan error, 1)
	go func() { watchDone <- WatchPlugin(ctx, dir, a, time.Hour, log) }()
	defer func() {
		cancel()
		if err := <-watchDone; err != nil {
			t.Errorf("WatchPlugin: %v", err)
		}
	}()
	sink.waitLine(t, 10*time.Second, "watching plug-in CA")

	writeGeneration("..2026_01_01_00_01_00.2", gen2)
	select {
	case <-updates:
	case <-time.After(10 * time.Second):
		t.Fatalf("no reload within 10s of the ..data swap")
	}
	if !a.Bundle().Roots[0].Equal(gen2.root.Cert) {
		t.Errorf("after the ..data swap the root is not the new one")
	}
}

func TestWatchPluginMissingDir(t *testing.T) {
	a := NewAuthority(newPluginSet(t).root, DefaultPolicy())
	err := WatchPlugin(context.Background(), filepath.Join(t.TempDir(), "absent"), a, 0, nil)
	if err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("WatchPlugin(missing dir) = %v, want an error naming it", err)
	}
}

// TestParseBundleTwoIntermediates: root → inter1 → ca-cert, with
// cert-chain.pem = ca-cert + inter1 + root and root-cert.pem holding an
// unrelated root first; Chain is [inter1] and Roots[0] the real root.
func TestParseBundleTwoIntermediates(t *testing.T) {
	gen := newPluginSet(t)
	inter1, err := ParseBundle(gen.cert, gen.key, gen.chain, gen.rootCert)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, chain := intermediate(t, inter1) // chain = ca-cert + inter1
	chain = append(chain, gen.rootCert...)
	unrelated := newPluginSet(t).rootCert
	roots := append(append([]byte(nil), unrelated...), gen.rootCert...)
	b, err := ParseBundle(cert, key, chain, roots)
	if err != nil {
		t.Fatalf("ParseBundle: %v", err)
	}
	if len(b.Chain) != 1 || !b.Chain[0].Equal(inter1.Cert) {
		t.Fatalf("Chain has %d certificates, want inter1 only", len(b.Chain))
	}
	if len(b.Roots) != 2 || !b.Roots[0].Equal(gen.root.Cert) {
		t.Fatalf("Roots[0] is not the root that signs the chain")
	}
	if !bytes.Equal(b.RootPEM, roots) || !bytes.Equal(b.ChainPEM, chain) {
		t.Errorf("PEM not kept byte for byte")
	}
	if got, want := b.RootExpiry(), gen.root.Cert.NotAfter; got.After(want) {
		t.Errorf("RootExpiry %v after the root's NotAfter %v", got, want)
	}
	if got := b.ChainExpiry(); !got.Equal(b.Cert.NotAfter) && !got.Equal(inter1.Cert.NotAfter) {
		t.Errorf("ChainExpiry %v is neither ca-cert's nor inter1's NotAfter", got)
	}
	pemChain, err := NewAuthority(b, DefaultPolicy()).Sign(mustCSR(t), testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certs := parsePEMChain(t, pemChain)
	if len(certs) != 4 || !certs[1].Equal(b.Cert) || !certs[2].Equal(inter1.Cert) || !certs[3].Equal(gen.root.Cert) {
		t.Fatalf("Sign chain: %d certificates, want leaf, ca-cert, inter1, root", len(certs))
	}
	if out, err := opensslVerify(t, gen.rootCert, pemChain); err != nil || !strings.Contains(out, ": OK") {
		t.Fatalf("openssl verify through two intermediates: %v\n%s", err, out)
	}
}
