// Package ca_test is issue 5's acceptance: the CA and the secure port of a
// real control plane, against a real kube-apiserver (TokenReview, Secrets,
// ConfigMaps), checked with the real openssl.
package ca_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

func spiffe(ns, sa string) string { return "spiffe://cluster.local/ns/" + ns + "/sa/" + sa }

// TestCertificateForServiceAccountToken: a CSR with a real token, checked
// by TokenReview, returns a chain openssl verifies, with the SPIFFE SAN and
// the requested TTL; no TTL means DEFAULT_WORKLOAD_CERT_TTL.
func TestCertificateForServiceAccountToken(t *testing.T) {
	srv, logs := startServer(t, env, nil)
	token := env.ServiceAccountToken(t, "bookinfo", "bookinfo-productpage", "istio-ca")
	root := publishedRoot(t, srv, "bookinfo")
	conn := dialSecure(t, srv, []byte(root), nil)
	dir := t.TempDir()
	rootFile := filepath.Join(dir, "root-cert.pem")
	if err := os.WriteFile(rootFile, []byte(root), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		ttl, want time.Duration
	}{{"requested 1h", time.Hour, time.Hour}, {"default", 0, 24 * time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			_, csr := csrFor(t, spiffe("bookinfo", "bookinfo-productpage"))
			before := time.Now()
			resp, err := createCertificate(t.Context(), conn, token, csr, tc.ttl)
			if err != nil {
				t.Fatalf("CreateCertificate: %v", err)
			}
			chain := resp.GetCertChain()
			if len(chain) < 2 || strings.TrimSpace(chain[len(chain)-1]) != strings.TrimSpace(root) {
				t.Fatalf("chain of %d: want leaf first and the published root last", len(chain))
			}
			files := writeChain(t, t.TempDir(), chain)
			opensslVerify(t, rootFile, files[0], files[1:len(files)-1]...)
			text := openssl(t, "x509", "-in", files[0], "-noout", "-ext", "subjectAltName")
			if !strings.Contains(text, "URI:"+spiffe("bookinfo", "bookinfo-productpage")) {
				t.Fatalf("leaf SAN: %s", text)
			}
			leaf := parseLeaf(t, chain)
			if life := leaf.NotAfter.Sub(before); life < tc.want-time.Minute || life > tc.want+time.Minute {
				t.Fatalf("leaf valid for %v from now, want %v", life, tc.want)
			}
			if !leaf.NotBefore.Before(before) {
				t.Fatalf("NotBefore %v is not backdated before the request (%v)", leaf.NotBefore, before)
			}
		})
	}
	if got := metric(t, srv, "citadel_server_success_cert_issuance_count"); got != 2 {
		t.Fatalf("citadel_server_success_cert_issuance_count = %v, want 2", got)
	}
	if strings.Contains(logs.String(), token) {
		t.Fatal("the log contains the token")
	}
}

// TestRefusals: every refusal has its gRPC code, moves a metric, logs a
// line without the token, and leaves the server issuing.
func TestRefusals(t *testing.T) {
	srv, logs := startServer(t, env, nil)
	const ns, sa = "refusals", "reviews"
	token := env.ServiceAccountToken(t, ns, sa, "istio-ca")
	other := env.ServiceAccountToken(t, ns, "ratings", "istio-ca")
	apiAudience := env.ServiceAccountToken(t, ns, sa)
	expired := env.SignToken(t, ns, sa, []string{"istio-ca"}, time.Now().Add(-time.Minute))
	root := publishedRoot(t, srv, ns)
	conn := dialSecure(t, srv, []byte(root), nil)
	_, good := csrFor(t, spiffe(ns, sa))
	_, wrongSAN := csrFor(t, spiffe(ns, "ratings"))
	_, twoSANs := csrFor(t, spiffe(ns, sa), spiffe(ns, "ratings"))

	cases := []struct {
		name, token, csr string
		ttl              time.Duration
		code             codes.Code
		series           string // Istio's counter that must move
		reason           string // meshpilot_ca_rejections_total reason
	}{
		{"SAN of another service account", token, wrongSAN, 0, codes.PermissionDenied, "citadel_server_id_extraction_err_count", "identity_mismatch"},
		{"SAN of the caller's token but not its CSR", other, good, 0, codes.PermissionDenied, "citadel_server_id_extraction_err_count", "identity_mismatch"},
		{"two SANs", token, twoSANs, 0, codes.PermissionDenied, "citadel_server_id_extraction_err_count", "identity_mismatch"},
		{"garbage token", "not-a-jwt", good, 0, codes.Unauthenticated, "citadel_server_authentication_failure_count", "unauthenticated"},
		{"expired token", expired, good, 0, codes.Unauthenticated, "citadel_server_authentication_failure_count", "unauthenticated"},
		{"token for the API server's audience", apiAudience, good, 0, codes.Unauthenticated, "citadel_server_authentication_failure_count", "unauthenticated"},
		{"no credential", "", good, 0, codes.Unauthenticated, "citadel_server_authentication_failure_count", "unauthenticated"},
		{"garbage CSR", token, "-----BEGIN CERTIFICATE REQUEST-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE REQUEST-----\n", 0, codes.InvalidArgument, "citadel_server_csr_parsing_err_count", "invalid_csr"},
		{"oversized request", token, good + strings.Repeat("A", 100<<10), 0, codes.ResourceExhausted, "citadel_server_csr_count", "oversized"},
		{"TTL over the maximum", token, good, 91 * 24 * time.Hour, codes.InvalidArgument, `citadel_server_csr_sign_err_count{error_type="TTL_ERROR"}`, "ttl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rejections := `meshpilot_ca_rejections_total{reason="` + tc.reason + `",service="ca"}`
			beforeIstio, beforeOurs := metric(t, srv, tc.series), metric(t, srv, rejections)
			_, err := createCertificate(t.Context(), conn, tc.token, tc.csr, tc.ttl)
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, err, tc.code)
			}
			if metric(t, srv, tc.series) <= beforeIstio {
				t.Errorf("%s did not move", tc.series)
			}
			if metric(t, srv, rejections) != beforeOurs+1 {
				t.Errorf("%s did not move by one", rejections)
			}
			if !strings.Contains(logs.String(), `"reason":"`+tc.reason+`"`) {
				t.Errorf("no log line with reason %s", tc.reason)
			}
		})
	}

	t.Run("plaintext call on the secure port", func(t *testing.T) {
		series := `meshpilot_ca_rejections_total{reason="not_tls",service="tls"}`
		before := metric(t, srv, series)
		plain, err := grpc.NewClient(srv.SecureGRPCListenAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err = createCertificate(ctx, plain, token, good, 0)
		if got := status.Code(err); got != codes.Unavailable {
			t.Fatalf("code %v (%v), want Unavailable", got, err)
		}
		waitFor(t, series+" to move", func() bool { return metric(t, srv, series) > before })
		if !strings.Contains(logs.String(), "TLS handshake failed on the secure port") {
			t.Fatal("no log line for the plaintext handshake")
		}
	})

	for _, secret := range []string{token, other, apiAudience, expired} {
		if strings.Contains(logs.String(), secret) {
			t.Fatal("the log contains a token")
		}
	}
	// The server is unaffected: the same connection still gets certificates.
	if _, err := createCertificate(t.Context(), conn, token, good, time.Hour); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
}

// TestRenewalWithClientCertificate: a workload certificate authenticates
// its own renewal without a token, and only for its own identity.
func TestRenewalWithClientCertificate(t *testing.T) {
	srv, _ := startServer(t, env, nil)
	const ns, sa = "renewal", "details"
	token := env.ServiceAccountToken(t, ns, sa, "istio-ca")
	root := publishedRoot(t, srv, ns)
	key, csr := csrFor(t, spiffe(ns, sa))
	resp, err := createCertificate(t.Context(), dialSecure(t, srv, []byte(root), nil), token, csr, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	withCert := dialSecure(t, srv, []byte(root), tlsCert(t, resp.GetCertChain(), key))
	_, renewal := csrFor(t, spiffe(ns, sa))
	renewed, err := createCertificate(t.Context(), withCert, "", renewal, time.Hour)
	if err != nil {
		t.Fatalf("renewal with the client certificate: %v", err)
	}
	if got := parseLeaf(t, renewed.GetCertChain()).URIs[0].String(); got != spiffe(ns, sa) {
		t.Fatalf("renewed SAN %s", got)
	}
	_, elsewhere := csrFor(t, spiffe(ns, "productpage"))
	if _, err := createCertificate(t.Context(), withCert, "", elsewhere, time.Hour); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("client certificate asking for another identity: %v, want PermissionDenied", err)
	}
}

// TestRestartReusesRootAndPublishesEverywhere: the root survives a restart
// (Secret istio-ca-secret) and the root ConfigMap reaches every namespace,
// including one created after start.
func TestRestartReusesRootAndPublishesEverywhere(t *testing.T) {
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.CA.RootCADir = filepath.Join(t.TempDir(), "no-plugin")
	first, stop := bootstraptest.StartStoppable(t, opts)
	ctx := t.Context()
	rootBefore := string(first.Authority().Bundle().RootPEM)
	nss, err := env.Clientset().CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss.Items {
		if got := waitRootConfigMap(t, env, ns.Name, nil); got != rootBefore {
			t.Fatalf("namespace %s: ConfigMap root differs from the CA's", ns.Name)
		}
	}
	later := createNamespace(t, env, "created-later")
	waitRootConfigMap(t, env, later, func(s string) bool { return s == rootBefore })
	stop()

	second := bootstraptest.Start(t, opts)
	if got := string(second.Authority().Bundle().RootPEM); got != rootBefore {
		t.Fatal("the restarted server made a new root instead of reusing Secret istio-ca-secret")
	}
	// The restarted server leads and keeps publishing: a namespace made now gets the same root.
	afterRestart := createNamespace(t, env, "created-after-restart")
	waitRootConfigMap(t, env, afterRestart, func(s string) bool { return s == rootBefore })
}
