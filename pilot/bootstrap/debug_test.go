package bootstrap_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/redact"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

const (
	gatewayNS  = "istio-ingress"
	credential = "kubernetes://ingress-cert"
)

// credentialsDir writes a config directory with Gateway istio-ingress/https
// (credentialName ingress-cert) and its kubernetes.io/tls Secret holding
// cert, key and a CA; it returns the directory.
func credentialsDir(t *testing.T, cert, key, ca []byte) string {
	t.Helper()
	dir := t.TempDir()
	b64 := base64.StdEncoding.EncodeToString
	files := map[string]string{
		"gateway.yaml": `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: https, namespace: istio-ingress}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ["*.example.com"]
    tls: {mode: SIMPLE, credentialName: ingress-cert}
`,
		"secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: ingress-cert, namespace: istio-ingress}\n" +
			"type: kubernetes.io/tls\ndata:\n  tls.crt: " + b64(cert) + "\n  tls.key: " + b64(key) + "\n  ca.crt: " + b64(ca) + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func routerNode(t *testing.T) *corev3.Node {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": gatewayNS, "SERVICE_ACCOUNT": "istio-ingressgateway",
		"LABELS": map[string]any{"istio": "ingressgateway"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: "router~10.244.0.30~gw-0." + gatewayNS + "~" + gatewayNS + ".svc.cluster.local", Metadata: md}
}

func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// keyForms are the ways key material could show in a JSON body: PEM text,
// the base64 of the whole PEM (protojson bytes), and each line of the PEM
// body.
func keyForms(key []byte) []string {
	forms := []string{"PRIVATE KEY", string(key), base64.StdEncoding.EncodeToString(key)}
	for _, line := range strings.Split(string(key), "\n") {
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			forms = append(forms, line)
		}
	}
	return forms
}

// TestDebugEndpointsNeverShowKeys: a gateway authenticated on the secure
// port holds its Secret's key (SDS gives it), yet no /debug/* answer
// (syncz, configz, registryz, config_dump of every type it watches, by
// connection and by node ID) contains the key in any form; config_dump
// shows the secret redacted, its certificate intact. The debug endpoints
// are on --debugAddr only: --httpAddr answers /ready and 404 for /debug/*.
func TestDebugEndpointsNeverShowKeys(t *testing.T) {
	cert, key := testutil.SelfSignedCert(t, "gw.example.com")
	caPEM, _ := testutil.SelfSignedCert(t, "ca.example.com")
	opts := bootstraptest.Options(t)
	opts.ConfigDir = credentialsDir(t, cert, key, caPEM)
	opts.DebugAddr = "127.0.0.1:0"
	srv := bootstraptest.Start(t, opts)

	conn := bootstraptest.DialSecureAs(t, srv, gatewayNS, "istio-ingressgateway")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := routerNode(t)
	requests := []*discovery.DiscoveryRequest{
		{Node: node, TypeUrl: model.ClusterType},
		{TypeUrl: model.ListenerType},
		{TypeUrl: model.SecretType, ResourceNames: []string{credential, credential + "-cacert"}},
	}
	var gotKey bool
	for _, req := range requests {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range resp.GetResources() {
			sec := &tlsv3.Secret{}
			if a.MessageIs(sec) {
				if err := a.UnmarshalTo(sec); err != nil {
					t.Fatal(err)
				}
				gotKey = gotKey || string(sec.GetTlsCertificate().GetPrivateKey().GetInlineBytes()) == string(key)
			}
		}
	}
	if !gotKey {
		t.Fatal("the authenticated gateway did not receive its key over SDS: the test would prove nothing")
	}

	debug := srv.DebugListenAddr()
	var syncz []struct {
		ConnectionID, NodeID string
		Types                map[string]json.RawMessage
	}
	code, body := get(t, debug, "/debug/connectionz")
	if err := json.Unmarshal([]byte(body), &syncz); code != http.StatusOK || err != nil || len(syncz) != 1 || len(syncz[0].Types) != 3 {
		t.Fatalf("connectionz: %d %v: %s", code, err, body)
	}
	bodies := map[string]string{"/debug/connectionz": body}
	paths := []string{"/debug/syncz", "/debug/configz", "/debug/registryz", "/debug/adsz",
		"/debug/config_dump?proxyID=" + url.QueryEscape(syncz[0].ConnectionID),
		"/debug/config_dump?include_eds&proxyID=" + url.QueryEscape(syncz[0].NodeID)}
	for _, p := range paths {
		code, body := get(t, debug, p)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d: %s", p, code, body)
		}
		bodies[p] = body
	}
	for p, body := range bodies {
		for _, form := range keyForms(key) {
			if strings.Contains(body, form) {
				t.Errorf("GET %s shows key material (%.40q)", p, form)
			}
		}
	}
	dump := &adminv3.ConfigDump{}
	if err := protojson.Unmarshal([]byte(bodies[paths[4]]), dump); err != nil {
		t.Fatal(err)
	}
	var clusters adminv3.ClustersConfigDump
	var listeners adminv3.ListenersConfigDump
	var secrets adminv3.SecretsConfigDump
	for _, a := range dump.GetConfigs() {
		for _, m := range []proto.Message{&clusters, &listeners, &secrets} {
			if a.MessageIs(m) {
				if err := a.UnmarshalTo(m); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if len(clusters.GetDynamicActiveClusters()) == 0 || len(listeners.GetDynamicListeners()) == 0 || len(secrets.GetDynamicActiveSecrets()) != 2 {
		t.Fatalf("config_dump lacks a type: %d clusters, %d listeners, %d secrets",
			len(clusters.GetDynamicActiveClusters()), len(listeners.GetDynamicListeners()), len(secrets.GetDynamicActiveSecrets()))
	}
	var sawCert, sawRedacted bool
	for _, ds := range secrets.GetDynamicActiveSecrets() {
		sec := &tlsv3.Secret{}
		if err := ds.GetSecret().UnmarshalTo(sec); err != nil {
			t.Fatal(err)
		}
		if tc := sec.GetTlsCertificate(); tc != nil {
			sawCert = string(tc.GetCertificateChain().GetInlineBytes()) == string(cert)
			sawRedacted = string(tc.GetPrivateKey().GetInlineBytes()) == redact.Redacted
		}
	}
	if !sawCert || !sawRedacted {
		t.Errorf("config_dump secrets do not show the certificate and a redacted key: %v", &secrets)
	}

	httpAddr := srv.HTTPListenAddr()
	if code, _ := get(t, httpAddr, "/ready"); code != http.StatusOK {
		t.Errorf("/ready on --httpAddr: %d", code)
	}
	for _, p := range append([]string{"/debug/connectionz", "/debug/pprof/"}, paths...) {
		if code, _ := get(t, httpAddr, p); code != http.StatusNotFound {
			t.Errorf("GET %s on --httpAddr: %d, want 404 (debug is on --debugAddr)", p, code)
		}
	}
}

// TestDebugOnHTTP: without --debugAddr the debug endpoints are on
// --httpAddr (istiod's ENABLE_DEBUG_ON_HTTP=true), and nowhere with
// EnableDebugOnHTTP false; /ready answers either way.
func TestDebugOnHTTP(t *testing.T) {
	for _, on := range []bool{true, false} {
		opts := bootstraptest.Options(t)
		opts.ConfigDir = t.TempDir()
		opts.EnableDebugOnHTTP = on
		srv := bootstraptest.Start(t, opts)
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		for _, p := range []string{"/debug/syncz", "/debug/registryz", "/debug/pprof/"} {
			if code, _ := get(t, srv.HTTPListenAddr(), p); code != want {
				t.Errorf("EnableDebugOnHTTP=%v: GET %s: %d, want %d", on, p, code, want)
			}
		}
		if code, _ := get(t, srv.HTTPListenAddr(), "/ready"); code != http.StatusOK {
			t.Errorf("EnableDebugOnHTTP=%v: /ready: %d", on, code)
		}
		if srv.DebugListenAddr() != "" {
			t.Errorf("DebugListenAddr = %q without --debugAddr", srv.DebugListenAddr())
		}
	}
}
