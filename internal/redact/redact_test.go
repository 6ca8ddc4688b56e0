package redact

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	xdstype "github.com/cncf/xds/go/xds/type/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	wasmhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	keyPEM  = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleQ==\n-----END PRIVATE KEY-----\n"
	certPEM = "-----BEGIN CERTIFICATE-----\nY2VydA==\n-----END CERTIFICATE-----\n"
)

func inlineBytes(b string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte(b)}}
}

func inlineString(s string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: s}}
}

// shows reports whether JSON js holds value as a string or as bytes
// (protojson writes bytes in standard base64).
func shows(js, value string) bool {
	return strings.Contains(js, value) || strings.Contains(js, base64.StdEncoding.EncodeToString([]byte(value))) ||
		strings.Contains(js, strings.ReplaceAll(value, "\n", `\n`))
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestSecretsRedacted: every secret an SDS Secret can carry is redacted,
// the certificate chain and the CA are kept, and the input is untouched.
func TestSecretsRedacted(t *testing.T) {
	cases := map[string]*tlsv3.Secret{
		"tls certificate": {Name: "kubernetes://cert", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: inlineBytes(certPEM), PrivateKey: inlineBytes(keyPEM),
			Password: inlineString("key-password"), Pkcs12: inlineBytes("pkcs12-blob"),
		}}},
		"generic secret": {Name: "hmac", Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{
			Secret:  inlineString("hmac-secret"),
			Secrets: map[string]*corev3.DataSource{"token": inlineBytes("token-secret")},
		}}},
		"session ticket keys": {Name: "stek", Type: &tlsv3.Secret_SessionTicketKeys{SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{
			Keys: []*corev3.DataSource{inlineBytes("ticket-key-1"), inlineString("ticket-key-2")},
		}}},
	}
	secrets := []string{keyPEM, "key-password", "pkcs12-blob", "hmac-secret", "token-secret", "ticket-key-1", "ticket-key-2"}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			before := proto.Clone(in)
			out := Copy(in)
			if !proto.Equal(in, before) {
				t.Fatal("Copy modified its input")
			}
			js := protojson.Format(out)
			for _, s := range secrets {
				if shows(js, s) {
					t.Errorf("%q survives: %s", s, js)
				}
			}
			if !shows(js, Redacted) {
				t.Errorf("nothing marked redacted: %s", js)
			}
		})
	}
	out := Copy(cases["tls certificate"])
	if got := string(out.GetTlsCertificate().GetCertificateChain().GetInlineBytes()); got != certPEM {
		t.Errorf("certificate chain changed to %q", got)
	}
	if got := string(out.GetTlsCertificate().GetPrivateKey().GetInlineBytes()); got != Redacted {
		t.Errorf("private key = %q, want %q", got, Redacted)
	}
}

// TestNestedAnyRedacted: a private key inside a listener's transport
// socket (an Any inside an Any) is redacted; an Any of an unknown type
// loses its bytes.
func TestNestedAnyRedacted(t *testing.T) {
	tlsCtx := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificates: []*tlsv3.TlsCertificate{{CertificateChain: inlineBytes(certPEM), PrivateKey: inlineBytes(keyPEM)}},
	}}
	l := &listenerv3.Listener{Name: "gw", FilterChains: []*listenerv3.FilterChain{{
		TransportSocket: &corev3.TransportSocket{Name: "tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, tlsCtx)}},
	}}}
	resource := mustAny(t, l)
	orig := bytes.Clone(resource.GetValue())
	out := Copy(resource)
	if !bytes.Equal(resource.GetValue(), orig) {
		t.Fatal("Copy modified the shared resource")
	}
	js := protojson.Format(out)
	if shows(js, keyPEM) || !shows(js, certPEM) || !shows(js, Redacted) {
		t.Errorf("redacted listener: %s", js)
	}

	unknown := &anypb.Any{TypeUrl: "type.googleapis.com/no.such.Type", Value: []byte(keyPEM)}
	if got := Copy(unknown); len(got.GetValue()) != 0 || got.GetTypeUrl() != unknown.GetTypeUrl() {
		t.Errorf("unknown Any kept %q", got.GetValue())
	}
}

// TestTypedStructRedacted: a TypedStruct is redacted through the schema of
// the type it names.
func TestTypedStructRedacted(t *testing.T) {
	st, err := structpb.NewStruct(map[string]any{
		"tlsCertificate": map[string]any{"privateKey": map[string]any{"inlineString": "struct-secret"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := &xdstype.TypedStruct{TypeUrl: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret", Value: st}
	js := protojson.Format(Copy(ts))
	if strings.Contains(js, "struct-secret") || !strings.Contains(js, Redacted) {
		t.Errorf("typed struct: %s", js)
	}
}

// TestWasmPullSecretRedacted: the pull secret a WasmPlugin's ECDS resource
// carries for the agent is redacted inside the TypedExtensionConfig's Any;
// the other environment variables and the module URL stay.
func TestWasmPullSecretRedacted(t *testing.T) {
	const dockerConfig = `{"auths":{"registry.example":{"auth":"dXNlcjpwYXNz"}}}`
	plugin := &wasmhttpv3.Wasm{Config: &wasmv3.PluginConfig{
		Name: "ns.p",
		Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
			Runtime: "envoy.wasm.runtime.v8",
			Code: &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Remote{Remote: &corev3.RemoteDataSource{
				HttpUri: &corev3.HttpUri{Uri: "oci://registry.example/p:1", HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: "_"}},
			}}},
			EnvironmentVariables: &wasmv3.EnvironmentVariables{KeyValues: map[string]string{
				WasmPullSecretEnv:                   dockerConfig,
				"ISTIO_META_WASM_IMAGE_PULL_POLICY": "Always",
			}},
		}},
	}}
	tec := &corev3.TypedExtensionConfig{Name: "extensions.istio.io/wasmplugin/ns.p", TypedConfig: mustAny(t, plugin)}
	js := protojson.Format(Copy(mustAny(t, tec)))
	if shows(js, dockerConfig) || shows(js, "dXNlcjpwYXNz") {
		t.Fatalf("pull secret shown: %s", js)
	}
	for _, want := range []string{Redacted, "Always", "oci://registry.example/p:1"} {
		if !shows(js, want) {
			t.Errorf("redacted ECDS resource lacks %q: %s", want, js)
		}
	}
}
