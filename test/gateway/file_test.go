package gateway_test

import (
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"google.golang.org/grpc"
)

// gatewayYAML is Gateway istio-ingress/https: port 443 HTTPS, SIMPLE,
// credentialName ingress-cert.
const gatewayYAML = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: https, namespace: istio-ingress}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ["*.example.com"]
    tls: {mode: SIMPLE, credentialName: ingress-cert}
`

// secretYAML is a kubernetes.io/tls Secret ns/name with base64 data.
func secretYAML(ns, name string, cert, key []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	return "apiVersion: v1\nkind: Secret\nmetadata: {name: " + name + ", namespace: " + ns + "}\n" +
		"type: kubernetes.io/tls\ndata:\n  tls.crt: " + b64(cert) + "\n  tls.key: " + b64(key) + "\n"
}

// writeAtomic replaces dir/name with content in one rename, so the
// watcher never reads half a file.
func writeAtomic(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// TestFileModeCredentials runs the server on a config directory only (no
// cluster): the Gateway's router gets kubernetes://ingress-cert from the
// Secret file in its namespace; rewriting that file pushes the new
// certificate to it, and a router of another namespace (watching its own
// Secret) receives nothing for it; a router of another namespace asking for
// ingress-cert gets nothing; no log line holds key material.
func TestFileModeCredentials(t *testing.T) {
	dir := t.TempDir()
	cert1, key1 := testutil.SelfSignedCert(t, "v1.example.com")
	otherCert1, otherKey1 := testutil.SelfSignedCert(t, "other.example.com")
	writeAtomic(t, dir, "gateway.yaml", gatewayYAML)
	writeAtomic(t, dir, "ingress-secret.yaml", secretYAML(ingressNS, "ingress-cert", cert1, key1))
	writeAtomic(t, dir, "other-secret.yaml", secretYAML("other", "other-cert", otherCert1, otherKey1))

	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.Log = bootstraptest.Logger(t, slog.LevelDebug, logs)
	srv := bootstraptest.Start(t, opts)
	checkListenerNamesCredential(t.Context(), t, srv.GRPCListenAddr())

	// Credentials need an authenticated gateway: here a client certificate
	// from the server's CA on the secure port.
	router := func(ns, ip string) (*grpc.ClientConn, *corev3.Node) {
		return dialSecureAs(t, srv, ns, "istio-ingressgateway"), routerNode(t, ns, "istio-ingressgateway", ip)
	}
	gwConn, gwNode := router(ingressNS, "10.244.0.30")
	gw := openSDSOn(t, gwConn, "", gwNode, credential)
	got := gw.next(t)
	if got[credential] == nil || chainOf(got[credential]) != string(cert1) ||
		string(got[credential].GetTlsCertificate().GetPrivateKey().GetInlineBytes()) != string(key1) {
		t.Fatalf("gateway got %v, want %s with the Secret file's certificate and key", got, credential)
	}
	const otherCredential = "kubernetes://other-cert"
	otherConn, otherNode := router("other", "10.244.0.31")
	other := openSDSOn(t, otherConn, "", otherNode, otherCredential)
	if got := other.next(t); got[otherCredential] == nil || chainOf(got[otherCredential]) != string(otherCert1) {
		t.Fatalf("gateway of namespace other got %v", got)
	}
	otherConn2, otherNode2 := router("other", "10.244.0.32")
	if got := openSDSOn(t, otherConn2, "", otherNode2, credential).next(t); len(got) != 0 {
		t.Errorf("gateway of namespace other got %s: %v", credential, got)
	}
	if got := openSDS(t, srv.GRPCListenAddr(), routerNode(t, ingressNS, "istio-ingressgateway", "10.244.0.34"), credential).next(t); len(got) != 0 {
		t.Errorf("the gateway's node on the plaintext port got %s: %v", credential, got)
	}

	cert2, key2 := testutil.SelfSignedCert(t, "v2.example.com")
	writeAtomic(t, dir, "ingress-secret.yaml", secretYAML(ingressNS, "ingress-cert", cert2, key2))
	if got := gw.next(t); got[credential] == nil || chainOf(got[credential]) != string(cert2) {
		t.Fatalf("after the file change the gateway got %v, want the new certificate", got)
	}
	// The next push the other router sees is for its own Secret's change:
	// the ingress-cert change did not reach it.
	otherCert2, otherKey2 := testutil.SelfSignedCert(t, "other2.example.com")
	writeAtomic(t, dir, "other-secret.yaml", secretYAML("other", "other-cert", otherCert2, otherKey2))
	if got := other.next(t); got[otherCredential] == nil || chainOf(got[otherCredential]) != string(otherCert2) {
		t.Fatalf("gateway of namespace other: next response %v, want only its own Secret's change", got)
	}

	for _, k := range [][]byte{key1, key2, otherKey1, otherKey2} {
		body := strings.TrimSpace(strings.Split(strings.Split(string(k), "-----\n")[1], "\n")[0])
		if strings.Contains(logs.String(), body) || strings.Contains(logs.String(), base64.StdEncoding.EncodeToString(k)[:40]) {
			t.Fatal("a log line holds key material")
		}
	}
}

// TestFileModeCredentialsOff: with PILOT_ENABLE_GATEWAY_CREDENTIALS=false
// the config directory's Secrets are not served (and a warning says so).
func TestFileModeCredentialsOff(t *testing.T) {
	dir := t.TempDir()
	cert, key := testutil.SelfSignedCert(t, "off.example.com")
	writeAtomic(t, dir, "gateway.yaml", gatewayYAML)
	writeAtomic(t, dir, "ingress-secret.yaml", secretYAML(ingressNS, "ingress-cert", cert, key))
	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.GatewayCredentials = false
	opts.Log = bootstraptest.Logger(t, slog.LevelWarn, logs)
	srv := bootstraptest.Start(t, opts)
	conn := dialSecureAs(t, srv, ingressNS, "istio-ingressgateway")
	if got := openSDSOn(t, conn, "", routerNode(t, ingressNS, "istio-ingressgateway", "10.244.0.33"), credential).next(t); len(got) != 0 {
		t.Errorf("gateway got %d secrets with credentials off, want none", len(got))
	}
	if !strings.Contains(logs.String(), "Secrets of the config directory are not served") {
		t.Errorf("no warning about the ignored Secrets: %s", logs.String())
	}
}
