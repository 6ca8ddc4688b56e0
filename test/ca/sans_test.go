package ca_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/pilot/bootstrap"
)

// TestTLSSANsIPAddress: an IP address given in --tlsSANs is an IP SAN of
// the secure port's certificate (not a DNS name), so a client dialling the
// control plane by IP verifies it; openssl checks it over a real handshake.
func TestTLSSANsIPAddress(t *testing.T) {
	srv, _ := startServer(t, env, func(o *bootstrap.Options) {
		o.TLSSANs = []string{"127.0.0.1", "::1", "xds.example.com"}
	})
	root := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(root, srv.Authority().Bundle().RootPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := srv.SecureGRPCListenAddr()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	connect := net.JoinHostPort("127.0.0.1", port)

	// openssl's own verifier, in the handshake: the IP must match an IP SAN.
	for _, ok := range []bool{true, false} {
		ip := "127.0.0.1"
		if !ok {
			ip = "127.0.0.2"
		}
		out, err := sClient(t, "-connect", connect, "-CAfile", root, "-verify_ip", ip, "-verify_return_error")
		switch {
		case ok && err != nil:
			t.Fatalf("openssl s_client -verify_ip %s: %v\n%s", ip, err, out)
		case !ok && err == nil:
			t.Fatalf("openssl s_client -verify_ip %s verified a certificate without that IP:\n%s", ip, out)
		}
	}
	out, err := sClient(t, "-connect", connect, "-CAfile", root, "-verify_hostname", "xds.example.com", "-verify_return_error")
	if err != nil {
		t.Fatalf("openssl s_client -verify_hostname xds.example.com: %v\n%s", err, out)
	}

	// And the certificate says so: IP SANs for the addresses, DNS for names.
	leaf := filepath.Join(t.TempDir(), "leaf.pem")
	if err := os.WriteFile(leaf, []byte(pemBlock(out)), 0o600); err != nil {
		t.Fatal(err)
	}
	text := openssl(t, "x509", "-in", leaf, "-noout", "-ext", "subjectAltName")
	for _, want := range []string{"IP Address:127.0.0.1", "IP Address:0:0:0:0:0:0:0:1", "DNS:xds.example.com", "DNS:istiod.istio-system.svc"} {
		if !strings.Contains(text, want) {
			t.Errorf("subjectAltName lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "DNS:127.0.0.1") {
		t.Errorf("127.0.0.1 is a DNS SAN:\n%s", text)
	}
}

// sClient runs openssl s_client with no input (it handshakes and exits).
func sClient(t *testing.T, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatal("openssl not found: install it (apt-get install openssl)")
	}
	cmd := exec.CommandContext(t.Context(), path, slices.Concat([]string{"s_client"}, args)...)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// pemBlock returns the first PEM certificate in s_client's output (the leaf).
func pemBlock(out string) string {
	const begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
	i := strings.Index(out, begin)
	j := strings.Index(out, end)
	if i < 0 || j < i {
		return ""
	}
	return out[i:j+len(end)] + "\n"
}
