package ca_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	securityapi "istio.io/api/security/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// istiodName is the name every client verifies in the secure port's certificate.
const istiodName = "istiod.istio-system.svc"

// startServer runs the control plane in Kubernetes mode against env with
// the secure port on, and returns it with its log.
func startServer(t *testing.T, env *kubetest.Env, mutate func(*bootstrap.Options)) (*bootstrap.Server, *bootstraptest.LogBuffer) {
	t.Helper()
	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.Log = bootstraptest.Logger(t, slog.LevelInfo, logs)
	opts.CA.RootCADir = filepath.Join(t.TempDir(), "no-plugin")
	if mutate != nil {
		mutate(&opts)
	}
	ensureNamespace(t, env, opts.Namespace)
	srv := bootstraptest.Start(t, opts)
	if srv.SecureGRPCListenAddr() == "" {
		t.Fatal("secure port not listening")
	}
	return srv, logs
}

// dialSecure connects to the secure port over TLS, trusting rootPEM and
// verifying istiod's name; cert, when not nil, is presented as the client
// certificate.
func dialSecure(t *testing.T, srv *bootstrap.Server, rootPEM []byte, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(rootPEM) {
		t.Fatal("root PEM holds no certificate")
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: istiodName, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(srv.SecureGRPCListenAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// csrFor returns a new P-256 key and a CSR whose URI SANs are uris.
func csrFor(t *testing.T, uris ...string) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// createCertificate calls CreateCertificate with token as the bearer (none when empty).
func createCertificate(ctx context.Context, conn *grpc.ClientConn, token, csr string, ttl time.Duration) (*securityapi.IstioCertificateResponse, error) {
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return securityapi.NewIstioCertificateServiceClient(conn).CreateCertificate(ctx, &securityapi.IstioCertificateRequest{
		Csr: csr, ValidityDuration: int64(ttl / time.Second),
	})
}

// waitRootConfigMap waits for ConfigMap istio-ca-root-cert in ns and returns its root-cert.pem.
func waitRootConfigMap(t *testing.T, env *kubetest.Env, ns string, want func(string) bool) string {
	t.Helper()
	var got string
	waitFor(t, "ConfigMap istio-ca-root-cert in namespace "+ns, func() bool {
		cm, err := env.Clientset().CoreV1().ConfigMaps(ns).Get(t.Context(), "istio-ca-root-cert", metav1.GetOptions{})
		if err != nil {
			return false
		}
		got = cm.Data["root-cert.pem"]
		return got != "" && (want == nil || want(got))
	})
	return got
}

// publishedRoot waits until ConfigMap istio-ca-root-cert in ns holds srv's
// root (an earlier test's server may have published another) and returns it.
func publishedRoot(t *testing.T, srv *bootstrap.Server, ns string) string {
	t.Helper()
	ensureNamespace(t, env, ns)
	want := string(srv.Authority().Bundle().RootPEM)
	return waitRootConfigMap(t, env, ns, func(s string) bool { return s == want })
}

// ensureNamespace creates ns unless it exists.
func ensureNamespace(t *testing.T, env *kubetest.Env, ns string) {
	t.Helper()
	_, err := env.Clientset().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
}

// createNamespace creates a new namespace named prefix plus a random
// suffix (namespaces are never finalized here, so names are not reused)
// and returns its name.
func createNamespace(t *testing.T, env *kubetest.Env, prefix string) string {
	t.Helper()
	ns, err := env.Clientset().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s-*: %v", prefix, err)
	}
	return ns.Name
}

// waitFor polls cond until it holds or 30 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, cond)
}

// metric scrapes /metrics and returns the value of the sample named
// exactly series (labels in Prometheus' sorted order), 0 when absent.
func metric(t *testing.T, srv *bootstrap.Server, series string) float64 {
	t.Helper()
	v, _ := bootstraptest.Metric(t, srv, series)
	return v
}

// writePEMs writes each certificate of a response chain to its own file
// in dir and returns the paths, leaf first.
func writeChain(t *testing.T, dir string, chain []string) []string {
	t.Helper()
	var paths []string
	for i, c := range chain {
		p := filepath.Join(dir, "chain-"+strconv.Itoa(i)+".pem")
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// openssl runs the real openssl and returns its combined output.
func openssl(t *testing.T, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatal("openssl not found: install it (apt-get install openssl)")
	}
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// opensslVerify checks leaf against root with any intermediates, using openssl.
func opensslVerify(t *testing.T, root, leaf string, intermediates ...string) {
	t.Helper()
	args := []string{"verify", "-CAfile", root}
	for _, i := range intermediates {
		args = append(args, "-untrusted", i)
	}
	out := openssl(t, append(args, leaf)...)
	if !strings.Contains(out, ": OK") {
		t.Fatalf("openssl verify: %s", out)
	}
}

// parseLeaf parses the first certificate of a chain.
func parseLeaf(t *testing.T, chain []string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode([]byte(chain[0]))
	if block == nil {
		t.Fatal("chain[0] is not PEM")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tlsCert makes a client certificate from an issued chain and its key.
func tlsCert(t *testing.T, chain []string, key *ecdsa.PrivateKey) *tls.Certificate {
	t.Helper()
	c := &tls.Certificate{PrivateKey: key}
	for _, p := range chain[:len(chain)-1] { // the root is not sent
		block, _ := pem.Decode([]byte(p))
		c.Certificate = append(c.Certificate, block.Bytes)
	}
	return c
}
