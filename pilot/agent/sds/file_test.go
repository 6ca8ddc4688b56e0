package sds_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/sds"
	"github.com/meshpilot/meshpilot/pilot/agent/sds/sdstest"
)

// writeFile writes b to dir/name and returns its path.
func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fileServer runs a Server whose "file-root:system" is looked for in
// osRoots, checking files every millisecond.
func fileServer(t *testing.T, osRoots ...string) *running {
	t.Helper()
	p := newFakeProvider()
	p.setBoth(t, "one")
	return startWith(t, sds.Options{SocketPath: socketPath(t), Provider: p, OSRootPaths: osRoots, FileCheckInterval: time.Millisecond})
}

// checkTrusted asserts s is a valid validation context named name trusting
// exactly want.
func checkTrusted(t *testing.T, s *tlsv3.Secret, name string, want []byte) {
	t.Helper()
	if err := s.ValidateAll(); err != nil {
		t.Fatalf("%s does not validate: %v", name, err)
	}
	if s.GetName() != name || !bytes.Equal(s.GetValidationContext().GetTrustedCa().GetInlineBytes(), want) {
		t.Fatalf("secret %q = %.200v, want a validation context of %s's file", s.GetName(), s, name)
	}
}

// waitErr waits for c's stream to end and checks it ended with code and a
// message containing each of want.
func waitErr(t *testing.T, c *sdstest.Client, code codes.Code, want ...string) {
	t.Helper()
	if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool { return c.Err() != nil }); err != nil {
		t.Fatal(err)
	}
	st := status.Convert(c.Err())
	if st.Code() != code {
		t.Fatalf("stream error = %v, want %v", c.Err(), code)
	}
	for _, w := range want {
		if !strings.Contains(st.Message(), w) {
			t.Fatalf("stream error = %v, want it to name %s", c.Err(), w)
		}
	}
}

// noKeyMaterial fails if the server's logs hold PEM.
func noKeyMaterial(t *testing.T, srv *running) {
	t.Helper()
	if logs := srv.logs.String(); strings.Contains(logs, "-----BEGIN") {
		t.Fatalf("logs carry PEM:\n%.2000s", logs)
	}
}

// TestFileRootSystem: "file-root:system" is the first OS bundle path that
// exists, served next to the workload certificate, and follows changes to
// that file.
func TestFileRootSystem(t *testing.T) {
	modes(t, func(t *testing.T, delta bool) {
		dir := t.TempDir()
		bundle, _ := testutil.SelfSignedCert(t, "os-root")
		second := writeFile(t, dir, "second.pem", bundle)
		third, _ := testutil.SelfSignedCert(t, "not-used")
		srv := fileServer(t, filepath.Join(dir, "missing.pem"), second, writeFile(t, dir, "third.pem", third))
		c := sdstest.Dial(t, srv.path, delta, node, "default", sds.SystemRootName)
		if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool {
			return c.Latest("default") != nil && c.Latest(sds.SystemRootName) != nil
		}); err != nil {
			t.Fatal(err)
		}
		checkTrusted(t, c.Latest(sds.SystemRootName), sds.SystemRootName, bundle)

		// A replaced bundle (as a package update renames a new file into
		// place) reaches the stream without a request.
		next, _ := testutil.SelfSignedCert(t, "os-root-2")
		tmp := writeFile(t, dir, "next.tmp", next)
		if err := os.Rename(tmp, second); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool {
			s := c.Latest(sds.SystemRootName)
			return bytes.Equal(s.GetValidationContext().GetTrustedCa().GetInlineBytes(), next)
		}); err != nil {
			t.Fatal(err)
		}
		checkTrusted(t, c.Latest(sds.SystemRootName), sds.SystemRootName, next)
		if c.Nacks() != 0 || c.Err() != nil {
			t.Fatalf("nacks=%d err=%v, want none", c.Nacks(), c.Err())
		}
		noKeyMaterial(t, srv)
	})
}

// TestFileRootSystemNone: without any OS bundle the stream ends with an
// error naming the resource.
func TestFileRootSystemNone(t *testing.T) {
	modes(t, func(t *testing.T, delta bool) {
		srv := fileServer(t, filepath.Join(t.TempDir(), "missing.pem"))
		c := sdstest.Dial(t, srv.path, delta, node, "default", sds.SystemRootName)
		waitErr(t, c, codes.NotFound, sds.SystemRootName, "no OS CA bundle")
	})
}

// TestFileRootPath serves a DestinationRule's caCertificates file.
func TestFileRootPath(t *testing.T) {
	modes(t, func(t *testing.T, delta bool) {
		dir := t.TempDir()
		ca, _ := testutil.SelfSignedCert(t, "dr-ca")
		name := "file-root:" + writeFile(t, dir, "ca.pem", ca)
		srv := fileServer(t)
		c := sdstest.Dial(t, srv.path, delta, node, name)
		if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool { return c.Latest(name) != nil }); err != nil {
			t.Fatal(err)
		}
		checkTrusted(t, c.Latest(name), name, ca)
	})
}

// TestFileCert serves a client certificate and key ("file-cert:CERT~KEY")
// and refuses a key that is not the certificate's.
func TestFileCert(t *testing.T) {
	modes(t, func(t *testing.T, delta bool) {
		dir := t.TempDir()
		chain, key := testutil.SelfSignedCert(t, "client")
		_, otherKey := testutil.SelfSignedCert(t, "other")
		certPath, keyPath := writeFile(t, dir, "cert.pem", chain), writeFile(t, dir, "key.pem", key)
		name := "file-cert:" + certPath + "~" + keyPath
		srv := fileServer(t)
		c := sdstest.Dial(t, srv.path, delta, node, name)
		if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool { return c.Latest(name) != nil }); err != nil {
			t.Fatal(err)
		}
		s := c.Latest(name)
		tc := s.GetTlsCertificate()
		if err := s.ValidateAll(); err != nil || !bytes.Equal(tc.GetCertificateChain().GetInlineBytes(), chain) ||
			!bytes.Equal(tc.GetPrivateKey().GetInlineBytes(), key) {
			t.Fatalf("secret %q (validate: %v) does not carry the files' chain and key", s.GetName(), err)
		}

		bad := "file-cert:" + certPath + "~" + writeFile(t, dir, "other.pem", otherKey)
		c = sdstest.Dial(t, srv.path, delta, node, bad)
		waitErr(t, c, codes.FailedPrecondition, bad)
		noKeyMaterial(t, srv)
	})
}

// TestFileRefused: a missing path, an oversize file, a directory, a file without a certificate and malformed
// names each end the stream with an error naming the resource.
func TestFileRefused(t *testing.T) {
	dir := t.TempDir()
	ca, _ := testutil.SelfSignedCert(t, "ca")
	big := append(bytes.Repeat([]byte("#"), sds.DefaultMaxFileSize), ca...)
	cases := []struct {
		name string
		code codes.Code
		want string
	}{
		{"file-root:" + filepath.Join(dir, "missing.pem"), codes.NotFound, "no such file"},
		{"file-root:" + writeFile(t, dir, "big.pem", big), codes.FailedPrecondition, "more than the 1048576 allowed"},
		{"file-root:" + dir, codes.FailedPrecondition, "not a regular file"},
		{"file-root:" + writeFile(t, dir, "text.pem", []byte("not a certificate\n")), codes.FailedPrecondition, "no PEM certificate"},
		{"file-cert:" + filepath.Join(dir, "cert.pem"), codes.InvalidArgument, "unknown"},
		{"file-root:", codes.InvalidArgument, "unknown"},
	}
	srv := fileServer(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			modes(t, func(t *testing.T, delta bool) {
				c := sdstest.Dial(t, srv.path, delta, node, "default", tc.name)
				waitErr(t, c, tc.code, `"`+tc.name+`"`, tc.want)
			})
		})
	}
	noKeyMaterial(t, srv)
}

// TestFileNamesBounded: a stream watching more file-mounted secrets than
// allowed ends before any file is read; other streams go on.
func TestFileNamesBounded(t *testing.T) {
	modes(t, func(t *testing.T, delta bool) {
		dir := t.TempDir()
		ca, _ := testutil.SelfSignedCert(t, "ca")
		writeFile(t, dir, "ca.pem", ca)
		srv := fileServer(t)
		names := []string{"default"}
		for i := range 65 { // 65 names of one file
			names = append(names, "file-root:"+dir+"/"+strings.Repeat("./", i)+"ca.pem")
		}
		c := sdstest.Dial(t, srv.path, delta, node, names...)
		waitErr(t, c, codes.ResourceExhausted, "65 file-mounted secrets")

		ok := sdstest.Dial(t, srv.path, delta, node, names[:3]...)
		if err := ok.WaitFor(waitCtx(t), func(c *sdstest.Client) bool { return c.Latest(names[2]) != nil }); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFileRootSystemThisHost serves this host's own OS CA bundle with the
// default paths: a real bundle of many roots fits the size cap and
// validates.
func TestFileRootSystemThisHost(t *testing.T) {
	var bundle []byte
	for _, p := range sds.OSRootPaths() {
		if b, err := os.ReadFile(p); err == nil {
			bundle = b
			break
		}
	}
	if bundle == nil {
		t.Skip("no OS CA bundle on this host")
	}
	srv := startServer(t, newFakeProvider(), socketPath(t))
	c := sdstest.Dial(t, srv.path, true, node, sds.SystemRootName)
	if err := c.WaitFor(waitCtx(t), func(c *sdstest.Client) bool { return c.Latest(sds.SystemRootName) != nil }); err != nil {
		t.Fatal(err)
	}
	checkTrusted(t, c.Latest(sds.SystemRootName), sds.SystemRootName, bundle)
	if n := bytes.Count(bundle, []byte("BEGIN CERTIFICATE")); n < 10 {
		t.Errorf("OS bundle of %d certificates, want many", n)
	}
}
