package secret_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/secret"
)

func tlsSecret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// gatewayProxy is a router of ns whose identity the secure port verified
// (service account istio-ingressgateway of ns).
func gatewayProxy(ns string) *model.Proxy {
	p := unverifiedGateway(ns)
	p.VerifiedIdentity = &model.VerifiedIdentity{
		SPIFFE:    "spiffe://cluster.local/ns/" + ns + "/sa/istio-ingressgateway",
		Namespace: ns, ServiceAccount: "istio-ingressgateway",
	}
	return p
}

// unverifiedGateway is a router of ns connected on the plaintext port.
func unverifiedGateway(ns string) *model.Proxy {
	return &model.Proxy{
		ID:        "router~10.244.1.1~istio-ingressgateway-0." + ns + "~" + ns + ".svc.cluster.local",
		Type:      model.Router,
		Namespace: ns,
		Metadata:  model.NodeMetadata{Namespace: ns, Labels: map[string]string{"istio": "ingressgateway"}},
	}
}

func watch(names ...string) *model.WatchedResource {
	w := &model.WatchedResource{TypeURL: model.SecretType, ResourceNames: map[string]struct{}{}}
	for _, n := range names {
		w.ResourceNames[n] = struct{}{}
	}
	return w
}

// generate returns the secrets served to proxy by name, each validated.
func generate(t *testing.T, g secret.Generator, proxy *model.Proxy, names ...string) map[string]*tlsv3.Secret {
	t.Helper()
	res, err := g.Generate(proxy, nil, watch(names...), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tlsv3.Secret{}
	for _, r := range res {
		s := &tlsv3.Secret{}
		if err := r.GetResource().UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		nt.ValidateRecursively(t, s)
		if s.GetName() != r.GetName() {
			t.Errorf("resource %q holds secret %q", r.GetName(), s.GetName())
		}
		out[r.GetName()] = s
	}
	return out
}

var secrets = secret.Static{
	tlsSecret("istio-system", "bookinfo-cert", map[string]string{"tls.crt": "CERT", "tls.key": "KEY", "ca.crt": "CA"}),
	tlsSecret("istio-system", "generic", map[string]string{"cert": "GCERT", "key": "GKEY"}),
	tlsSecret("istio-system", "generic-cacert", map[string]string{"cacert": "GCA"}),
	tlsSecret("other", "other-cert", map[string]string{"tls.crt": "OCERT", "tls.key": "OKEY"}),
}

func TestCertificateAndCA(t *testing.T) {
	g := secret.Generator{Secrets: secrets}
	got := generate(t, g, gatewayProxy("istio-system"),
		"kubernetes://bookinfo-cert", "kubernetes://bookinfo-cert-cacert",
		"kubernetes://generic", "kubernetes://generic-cacert", "kubernetes://istio-system/bookinfo-cert")
	check := func(name, cert, key string) {
		t.Helper()
		tc := got[name].GetTlsCertificate()
		if string(tc.GetCertificateChain().GetInlineBytes()) != cert || string(tc.GetPrivateKey().GetInlineBytes()) != key {
			t.Errorf("%s: got chain %q key %q, want %q %q", name, tc.GetCertificateChain().GetInlineBytes(), tc.GetPrivateKey().GetInlineBytes(), cert, key)
		}
	}
	check("kubernetes://bookinfo-cert", "CERT", "KEY")
	check("kubernetes://istio-system/bookinfo-cert", "CERT", "KEY")
	check("kubernetes://generic", "GCERT", "GKEY")
	for name, want := range map[string]string{"kubernetes://bookinfo-cert-cacert": "CA", "kubernetes://generic-cacert": "GCA"} {
		if ca := got[name].GetValidationContext().GetTrustedCa().GetInlineBytes(); string(ca) != want {
			t.Errorf("%s: trusted CA %q, want %q", name, ca, want)
		}
	}
	if len(got) != 5 {
		t.Errorf("got %d secrets, want 5", len(got))
	}
}

func TestRefused(t *testing.T) {
	var sink testutil.Buffer
	g := secret.Generator{Secrets: secrets, Logger: slog.New(slog.NewTextHandler(&sink, nil))}
	sidecar := nt.Proxy("10.244.0.6", "productpage-v1", "istio-system", nil)
	if got := generate(t, g, sidecar, "kubernetes://bookinfo-cert"); len(got) != 0 {
		t.Errorf("sidecar got %v", got)
	}
	if !strings.Contains(sink.String(), "sds refused") {
		t.Errorf("sidecar refusal not logged: %s", sink.String())
	}
	// A gateway of namespace other reads only other's Secrets.
	other := gatewayProxy("other")
	got := generate(t, g, other, "kubernetes://bookinfo-cert", "kubernetes://istio-system/bookinfo-cert",
		"kubernetes://other-cert", "file-cert:/etc/x", "default")
	if len(got) != 1 || got["kubernetes://other-cert"] == nil {
		t.Errorf("gateway of namespace other got %v, want only kubernetes://other-cert", got)
	}
	if !strings.Contains(sink.String(), `secret of namespace \"istio-system\" asked by spiffe://cluster.local/ns/other/sa/istio-ingressgateway`) {
		t.Errorf("cross-namespace refusal not logged: %s", sink.String())
	}
	// A gateway whose identity nobody verified (plaintext port) gets none
	// of its own namespace's credentials: its node metadata is only a claim.
	var plainSink testutil.Buffer
	g.Logger = slog.New(slog.NewTextHandler(&plainSink, nil))
	if got := generate(t, g, unverifiedGateway("istio-system"), "kubernetes://bookinfo-cert", "kubernetes://bookinfo-cert-cacert"); len(got) != 0 {
		t.Errorf("unverified gateway got %v, want nothing", got)
	}
	if !strings.Contains(plainSink.String(), "authenticated on the secure port") {
		t.Errorf("unverified refusal not logged: %s", plainSink.String())
	}
}

func TestMissingData(t *testing.T) {
	g := secret.Generator{Secrets: secret.Static{tlsSecret("ns", "nokey", map[string]string{"tls.crt": "C"})}}
	if got := generate(t, g, gatewayProxy("ns"), "kubernetes://nokey", "kubernetes://nokey-cacert", "kubernetes://absent"); len(got) != 0 {
		t.Errorf("got %v, want nothing", got)
	}
}

type failing struct{}

func (failing) Secret(string, string) (*corev1.Secret, error) { return nil, errors.New("boom") }

func TestListerError(t *testing.T) {
	if got := generate(t, secret.Generator{Secrets: failing{}}, gatewayProxy("ns"), "kubernetes://x"); len(got) != 0 {
		t.Errorf("got %v", got)
	}
}
