package ca_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pilot/bootstrap"
)

// makePluginCA writes a plug-in CA in Istio's layout with the real openssl:
// an EC root (SEC1 key) and an RSA intermediate (PKCS#8 key) that signs.
func makePluginCA(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := func(f string) string { return filepath.Join(dir, f) }
	ext := p("ca.ext")
	if err := os.WriteFile(ext, []byte("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	openssl(t, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", p("root-key.pem"))
	openssl(t, "req", "-x509", "-new", "-key", p("root-key.pem"), "-days", "3650", "-subj", "/O="+name+"/CN=Root CA",
		"-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", p("root-cert.pem"))
	openssl(t, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", p("ca-key.pem"))
	openssl(t, "req", "-new", "-key", p("ca-key.pem"), "-subj", "/O="+name+"/CN=Intermediate CA", "-out", p("ca.csr"))
	openssl(t, "x509", "-req", "-in", p("ca.csr"), "-CA", p("root-cert.pem"), "-CAkey", p("root-key.pem"), "-set_serial", "2",
		"-days", "730", "-extfile", ext, "-out", p("ca-cert.pem"))
	caCert, err := os.ReadFile(p("ca-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.ReadFile(p("root-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p("cert-chain.pem"), append(caCert, root...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// installPlugin copies the four plug-in files from src into dst, each by
// rename, the way a Secret volume or an operator's script replaces them.
func installPlugin(t *testing.T, src, dst string) {
	t.Helper()
	for _, f := range []string{"root-cert.pem", "cert-chain.pem", "ca-key.pem", "ca-cert.pem"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dst, "."+f+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dst, f)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPluginCA: certificates chain to the plug-in root through its
// intermediate, and replacing the files switches the signer (and the secure
// port's own certificate, and the published root) without a restart.
func TestPluginCA(t *testing.T) {
	base := t.TempDir()
	first, second, live := filepath.Join(base, "first"), filepath.Join(base, "second"), filepath.Join(base, "cacerts")
	makePluginCA(t, first, "first")
	makePluginCA(t, second, "second")
	if err := os.MkdirAll(live, 0o700); err != nil {
		t.Fatal(err)
	}
	installPlugin(t, first, live)

	srv, logs := startServer(t, env, func(o *bootstrap.Options) { o.CA.RootCADir = live })
	const ns, sa = "plugin", "reviews"
	token := env.ServiceAccountToken(t, ns, sa, "istio-ca")
	issue := func(rootFile string) []string {
		t.Helper()
		root, err := os.ReadFile(rootFile)
		if err != nil {
			t.Fatal(err)
		}
		_, csr := csrFor(t, spiffe(ns, sa))
		resp, err := createCertificate(t.Context(), dialSecure(t, srv, root, nil), token, csr, time.Hour)
		if err != nil {
			t.Fatalf("CreateCertificate trusting %s: %v", rootFile, err)
		}
		return resp.GetCertChain()
	}

	chain := issue(filepath.Join(first, "root-cert.pem"))
	if len(chain) != 3 {
		t.Fatalf("chain of %d certificates, want leaf, intermediate, root", len(chain))
	}
	files := writeChain(t, t.TempDir(), chain)
	opensslVerify(t, filepath.Join(first, "root-cert.pem"), files[0], files[1])
	if got := publishedRoot(t, srv, ns); !strings.Contains(got, "BEGIN CERTIFICATE") {
		t.Fatal("plug-in root not published")
	}

	installPlugin(t, second, live)
	waitFor(t, "the second plug-in CA to be loaded", func() bool {
		return string(srv.Authority().Bundle().RootPEM) == mustRead(t, filepath.Join(second, "root-cert.pem"))
	})
	chain = issue(filepath.Join(second, "root-cert.pem")) // the secure port now presents a certificate from the new CA
	files = writeChain(t, t.TempDir(), chain)
	opensslVerify(t, filepath.Join(second, "root-cert.pem"), files[0], files[1])
	out, err := exec.Command("openssl", "verify", "-CAfile", filepath.Join(first, "root-cert.pem"), "-untrusted", files[1], files[0]).CombinedOutput()
	if err == nil {
		t.Fatalf("a certificate from the new CA verified against the old root: %s", out)
	}
	publishedRoot(t, srv, ns) // the ConfigMap follows the new root

	// Broken files keep the last good CA in service.
	if err := os.WriteFile(filepath.Join(live, "ca-key.pem"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a log line about the broken ca-key.pem", func() bool {
		return strings.Contains(logs.String(), "ca-key.pem")
	})
	issue(filepath.Join(second, "root-cert.pem"))
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
