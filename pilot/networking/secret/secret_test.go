package secret_test

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/secrets"
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

// pushWith is a PushContext whose Secret snapshot holds secs (through the
// real source) and whose CredentialAccess is access (nil: none).
func pushWith(secs []*corev1.Secret, access model.CredentialAccess) *model.PushContext {
	src := secrets.NewSource()
	src.ReplaceFiles(secs)
	env := nt.Input{}.Environment()
	env.Secrets, env.CredentialAccess = src, access
	return model.NewPushContext(env, nil, nil)
}

// generate returns the secrets served to proxy from push by name, each validated.
func generate(t *testing.T, g secret.Generator, push *model.PushContext, proxy *model.Proxy, names ...string) map[string]*tlsv3.Secret {
	t.Helper()
	res, err := g.Generate(proxy, push, watch(names...), nil)
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

var fixture = []*corev1.Secret{
	tlsSecret("istio-system", "bookinfo-cert", map[string]string{"tls.crt": "CERT", "tls.key": "KEY", "ca.crt": "CA"}),
	tlsSecret("istio-system", "generic", map[string]string{"cert": "GCERT", "key": "GKEY"}),
	tlsSecret("istio-system", "generic-cacert", map[string]string{"cacert": "GCA"}),
	tlsSecret("other", "other-cert", map[string]string{"tls.crt": "OCERT", "tls.key": "OKEY"}),
}

func TestCertificateAndCA(t *testing.T) {
	got := generate(t, secret.Generator{}, pushWith(fixture, nil), gatewayProxy("istio-system"),
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
	g := secret.Generator{Logger: slog.New(slog.NewTextHandler(&sink, nil))}
	push := pushWith(fixture, nil)
	sidecar := nt.Proxy("10.244.0.6", "productpage-v1", "istio-system", nil)
	if got := generate(t, g, push, sidecar, "kubernetes://bookinfo-cert"); len(got) != 0 {
		t.Errorf("sidecar got %v", got)
	}
	if !strings.Contains(sink.String(), "sds refused") {
		t.Errorf("sidecar refusal not logged: %s", sink.String())
	}
	// A gateway of namespace other reads only other's Secrets.
	other := gatewayProxy("other")
	got := generate(t, g, push, other, "kubernetes://bookinfo-cert", "kubernetes://istio-system/bookinfo-cert",
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
	if got := generate(t, g, push, unverifiedGateway("istio-system"), "kubernetes://bookinfo-cert", "kubernetes://bookinfo-cert-cacert"); len(got) != 0 {
		t.Errorf("unverified gateway got %v, want nothing", got)
	}
	if !strings.Contains(plainSink.String(), "authenticated on the secure port") {
		t.Errorf("unverified refusal not logged: %s", plainSink.String())
	}
}

func TestMissingData(t *testing.T) {
	push := pushWith([]*corev1.Secret{tlsSecret("ns", "nokey", map[string]string{"tls.crt": "C"})}, nil)
	if got := generate(t, secret.Generator{}, push, gatewayProxy("ns"), "kubernetes://nokey", "kubernetes://nokey-cacert", "kubernetes://absent"); len(got) != 0 {
		t.Errorf("got %v, want nothing", got)
	}
	// Without a snapshot to read from, nothing either.
	if got := generate(t, secret.Generator{}, nil, gatewayProxy("ns"), "kubernetes://nokey"); len(got) != 0 {
		t.Errorf("without a PushContext got %v", got)
	}
}

// TestReadsOnlyItsPushContext: a PushContext keeps serving the Secrets of
// its snapshot after the source changed; the next build serves the change.
func TestReadsOnlyItsPushContext(t *testing.T) {
	src := secrets.NewSource()
	src.ReplaceFiles([]*corev1.Secret{tlsSecret("ns", "c", map[string]string{"tls.crt": "OLD", "tls.key": "K"})})
	env := nt.Input{}.Environment()
	env.Secrets = src
	before := model.NewPushContext(env, nil, nil)
	src.ReplaceFiles([]*corev1.Secret{tlsSecret("ns", "c", map[string]string{"tls.crt": "NEW", "tls.key": "K"})})
	after := model.NewPushContext(env, before, model.NewPushRequest(true, model.ReasonSecretTrigger,
		model.ConfigKey{Kind: model.KindSecret, Namespace: "ns", Name: "c"}))
	for push, want := range map[*model.PushContext]string{before: "OLD", after: "NEW"} {
		got := generate(t, secret.Generator{}, push, gatewayProxy("ns"), "kubernetes://c")
		if c := got["kubernetes://c"].GetTlsCertificate().GetCertificateChain().GetInlineBytes(); string(c) != want {
			t.Errorf("PushContext %s served %q, want %q", push.Version, c, want)
		}
	}
}

// decisions is a CredentialAccess answering from a table by namespace
// (absent: pending) and recording what it was asked.
type decisions struct {
	states map[string]model.AccessState
	calls  []string
}

func (d *decisions) Decide(id model.VerifiedIdentity, ns string) model.AccessDecision {
	d.calls = append(d.calls, id.Namespace+"/"+id.ServiceAccount+"->"+ns)
	st, ok := d.states[ns]
	switch {
	case !ok:
		return model.AccessDecision{State: model.AccessPending, Reason: "review pending"}
	case st == model.AccessDenied:
		return model.AccessDecision{State: st, Reason: fmt.Sprintf("not in %s", ns)}
	}
	return model.AccessDecision{State: st}
}

func verified(p *model.Proxy, sa string) *model.Proxy {
	p.VerifiedIdentity = &model.VerifiedIdentity{
		SPIFFE:    "spiffe://cluster.local/ns/" + p.Namespace + "/sa/" + sa,
		Namespace: p.Namespace, ServiceAccount: sa,
	}
	return p
}

// TestCrossNamespace: kubernetes://NS/NAME of another namespace is served
// only to a gateway with a verified identity the CredentialAccess allows in
// NS (certificate and CA); a pending decision serves nothing yet, unverified
// gateways and refused identities nothing at all, and the refusals are
// logged without key material.
func TestCrossNamespace(t *testing.T) {
	var sink testutil.Buffer
	access := &decisions{states: map[string]model.AccessState{"other": model.AccessAllowed, "istio-system": model.AccessDenied}}
	push := pushWith(fixture, access)
	g := secret.Generator{Logger: slog.New(slog.NewTextHandler(&sink, nil))}
	names := []string{"kubernetes://other/other-cert", "kubernetes://istio-system/generic-cacert", "kubernetes://istio-system/generic"}

	got := generate(t, g, push, verified(gatewayProxy("gw"), "ingress"), names...)
	if c := got["kubernetes://other/other-cert"].GetTlsCertificate().GetCertificateChain().GetInlineBytes(); string(c) != "OCERT" {
		t.Errorf("allowed namespace: certificate %q, want OCERT", c)
	}
	if len(got) != 1 {
		t.Errorf("got %d secrets, want only other's (istio-system not allowed): %v", len(got), got)
	}
	if !slices.Contains(access.calls, "gw/ingress->istio-system") {
		t.Errorf("access calls %v", access.calls)
	}
	if !strings.Contains(sink.String(), "forbidden: not in istio-system") {
		t.Errorf("refusal not logged: %s", sink.String())
	}
	if strings.Contains(sink.String(), "GKEY") || strings.Contains(sink.String(), "OKEY") {
		t.Errorf("key material logged: %s", sink.String())
	}

	delete(access.states, "istio-system")
	var pendingSink testutil.Buffer
	g.Logger = slog.New(slog.NewTextHandler(&pendingSink, nil))
	if got := generate(t, g, push, verified(gatewayProxy("gw"), "ingress"), names...); len(got) != 1 {
		t.Errorf("pending decision: got %d secrets, want only other's", len(got))
	}
	if n := strings.Count(pendingSink.String(), "sds resources not served"); n != 1 || !strings.Contains(pendingSink.String(), "authorization pending") {
		t.Errorf("pending not logged once per request (%d lines): %s", n, pendingSink.String())
	}

	access.states["istio-system"] = model.AccessAllowed
	got = generate(t, g, push, verified(gatewayProxy("gw"), "ingress"), names...)
	if ca := got["kubernetes://istio-system/generic-cacert"].GetValidationContext().GetTrustedCa().GetInlineBytes(); string(ca) != "GCA" {
		t.Errorf("CA %q, want GCA", ca)
	}
	if len(got) != 3 {
		t.Errorf("got %d secrets, want 3", len(got))
	}

	// Plaintext (no verified identity): nothing, and nobody is asked.
	access.calls = nil
	if got := generate(t, g, push, unverifiedGateway("gw"), names...); len(got) != 0 {
		t.Errorf("unverified gateway got %v", got)
	}
	if len(access.calls) != 0 {
		t.Errorf("access asked for an unverified gateway: %v", access.calls)
	}
	if got := generate(t, g, pushWith(fixture, nil), verified(gatewayProxy("gw"), "ingress"), names...); len(got) != 0 {
		t.Errorf("without a CredentialAccess got %v", got)
	}
}

// TestCRL serves a credential's revocation list (ca.crl, or crl in a
// generic Secret) with its CA.
func TestCRL(t *testing.T) {
	push := pushWith([]*corev1.Secret{
		tlsSecret("ns", "tls", map[string]string{"tls.crt": "C", "tls.key": "K", "ca.crt": "CA", "ca.crl": "CRL"}),
		tlsSecret("ns", "generic-cacert", map[string]string{"cacert": "GCA", "crl": "GCRL"}),
		tlsSecret("ns", "nocrl", map[string]string{"ca.crt": "NCA"}),
	}, nil)
	got := generate(t, secret.Generator{}, push, gatewayProxy("ns"), "kubernetes://tls-cacert", "kubernetes://generic-cacert", "kubernetes://nocrl-cacert")
	for name, want := range map[string]string{"kubernetes://tls-cacert": "CRL", "kubernetes://generic-cacert": "GCRL"} {
		if crl := got[name].GetValidationContext().GetCrl().GetInlineBytes(); string(crl) != want {
			t.Errorf("%s: crl %q, want %q", name, crl, want)
		}
	}
	if vc := got["kubernetes://nocrl-cacert"].GetValidationContext(); vc.GetCrl() != nil || string(vc.GetTrustedCa().GetInlineBytes()) != "NCA" {
		t.Errorf("without a CRL: %v", vc)
	}
}

// TestConfigMapCA checks configmap://NS/NAME-cacert: the ca.crt of a
// ConfigMap, served to verified gateways and sidecars of any namespace,
// refused on the plaintext port; a missing one or a malformed name gets
// no resource.
func TestConfigMapCA(t *testing.T) {
	src := secrets.NewSource()
	src.SetConfigMapCA("backends", "ca", []byte("CA-PEM"))
	src.SetConfigMapCA("backends", "empty", nil)
	env := nt.Input{}.Environment()
	env.Secrets = src
	push := model.NewPushContext(env, nil, nil)

	sidecar := nt.Proxy("10.0.0.9", "app-0", "apps", map[string]string{"app": "app"})
	sidecar.VerifiedIdentity = &model.VerifiedIdentity{SPIFFE: "spiffe://cluster.local/ns/apps/sa/app", Namespace: "apps", ServiceAccount: "app"}
	const name = "configmap://backends/ca-cacert"
	for _, p := range []*model.Proxy{gatewayProxy("ingress"), sidecar} {
		got := generate(t, secret.Generator{}, push, p, name, "configmap://backends/missing-cacert", "configmap://backends/empty-cacert",
			"configmap://backends/ca", "configmap://nonamespace-cacert", "kubernetes://other")
		if len(got) != 1 || string(got[name].GetValidationContext().GetTrustedCa().GetInlineBytes()) != "CA-PEM" {
			t.Errorf("%s: served %v, want only %s with the ConfigMap's ca.crt", p.Type, got, name)
		}
	}
	if got := generate(t, secret.Generator{}, push, unverifiedGateway("ingress"), name); len(got) != 0 {
		t.Errorf("plaintext port: served %v, want nothing", got)
	}
}

// TestConfigMapCAShared checks that with a CACache every proxy asking for a
// CA bundle gets the same marshalled resource (one copy, not one per
// proxy), and a changed ca.crt a new one.
func TestConfigMapCAShared(t *testing.T) {
	src := secrets.NewSource()
	src.SetConfigMapCA("backends", "ca", []byte("CA-1"))
	env := nt.Input{}.Environment()
	env.Secrets = src
	g := secret.Generator{CAs: secret.NewCACache()}
	const name = "configmap://backends/ca-cacert"
	get := func(push *model.PushContext, p *model.Proxy) *discovery.Resource {
		t.Helper()
		res, err := g.Generate(p, push, watch(name), nil)
		if err != nil || len(res) != 1 {
			t.Fatalf("%d resources, error %v", len(res), err)
		}
		return res[0]
	}
	push := model.NewPushContext(env, nil, nil)
	a, b := get(push, gatewayProxy("one")), get(push, gatewayProxy("two"))
	if a != b {
		t.Error("two proxies got two copies of one CA bundle")
	}
	src.SetConfigMapCA("backends", "ca", []byte("CA-2"))
	c := get(model.NewPushContext(env, nil, nil), gatewayProxy("one"))
	s := &tlsv3.Secret{}
	if err := c.GetResource().UnmarshalTo(s); err != nil {
		t.Fatal(err)
	}
	if c == a || string(s.GetValidationContext().GetTrustedCa().GetInlineBytes()) != "CA-2" {
		t.Errorf("after the change: %v", s)
	}
}

// gatewayAPIPush is a PushContext with Secret certs/tls, a Gateway the
// Gateway API translator generated in namespace gw (selecting the proxies
// of Gateway web) whose server names kubernetes-gateway://certs/tls, and
// a hand-written Istio Gateway of gw (selecting every ingressgateway)
// naming kubernetes-gateway://certs/hand with the same right claimed.
func gatewayAPIPush(access model.CredentialAccess) *model.PushContext {
	src := secrets.NewSource()
	src.ReplaceFiles([]*corev1.Secret{
		tlsSecret("certs", "tls", map[string]string{"tls.crt": "XCERT", "tls.key": "XKEY"}),
		tlsSecret("certs", "hand", map[string]string{"tls.crt": "HCERT", "tls.key": "HKEY"}),
	})
	server := func(cred string) []*networking.Server {
		return []*networking.Server{{
			Port:  &networking.Port{Number: 443, Protocol: "HTTPS", Name: "https"},
			Hosts: []string{"*/*"},
			Tls:   &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: cred},
		}}
	}
	in := nt.Input{Configs: []model.Config{
		{
			Meta: model.Meta{Kind: model.KindGateway, Namespace: "gw", Name: "web-istio-autogenerated-k8s-gateway-https", GatewayAPI: true},
			Spec: &networking.Gateway{Selector: map[string]string{gatewayNameLabel: "web"}, Servers: server("kubernetes-gateway://certs/tls")},
		},
		{
			Meta: model.Meta{Kind: model.KindGateway, Namespace: "gw", Name: "hand-written"},
			Spec: &networking.Gateway{Selector: map[string]string{"istio": "ingressgateway"}, Servers: server("kubernetes-gateway://certs/hand")},
		},
	}}
	env := in.Environment()
	env.Secrets, env.CredentialAccess = src, access
	return model.NewPushContext(env, nil, nil)
}

const gatewayNameLabel = "gateway.networking.k8s.io/gateway-name"

// gatewayOf is a verified gateway proxy of namespace ns deployed for the
// Gateway API Gateway name.
func gatewayOf(ns, name string) *model.Proxy {
	p := gatewayProxy(ns)
	p.Metadata.Labels = map[string]string{"istio": "ingressgateway", gatewayNameLabel: name}
	return p
}

// TestGatewayAPICertificateRef: kubernetes-gateway://NS/NAME, a Gateway
// API certificateRef the translator verified (ReferenceGrant), is served
// to the gateways of that Gateway's namespace it selects, without asking
// the CredentialAccess; not to a gateway of another Gateway, nor of
// another namespace, nor on the plaintext port, nor when only a
// hand-written Istio Gateway names it.
func TestGatewayAPICertificateRef(t *testing.T) {
	var sink testutil.Buffer
	access := &decisions{states: map[string]model.AccessState{}}
	push := gatewayAPIPush(access)
	g := secret.Generator{Logger: slog.New(slog.NewTextHandler(&sink, nil))}
	const ref, hand = "kubernetes-gateway://certs/tls", "kubernetes-gateway://certs/hand"

	got := generate(t, g, push, gatewayOf("gw", "web"), ref, hand)
	tc := got[ref].GetTlsCertificate()
	if string(tc.GetCertificateChain().GetInlineBytes()) != "XCERT" || string(tc.GetPrivateKey().GetInlineBytes()) != "XKEY" {
		t.Errorf("verified certificateRef: got %v, want XCERT and XKEY", got[ref])
	}
	if _, ok := got[hand]; ok || len(got) != 1 {
		t.Errorf("got %d secrets (%v), want only %s: a hand-written Gateway vouches for nothing", len(got), slices.Collect(maps.Keys(got)), ref)
	}
	if len(access.calls) != 0 {
		t.Errorf("CredentialAccess asked for a verified certificateRef: %v", access.calls)
	}
	if !strings.Contains(sink.String(), "is not a certificateRef of a Gateway API Gateway") || strings.Contains(sink.String(), "HKEY") {
		t.Errorf("refusal of %s not logged (or key logged): %s", hand, sink.String())
	}

	for what, p := range map[string]*model.Proxy{
		"gateway of another Gateway":   gatewayOf("gw", "other"),
		"gateway of another namespace": gatewayOf("elsewhere", "web"),
		"unverified gateway":           func() *model.Proxy { p := gatewayOf("gw", "web"); p.VerifiedIdentity = nil; return p }(),
	} {
		if got := generate(t, g, push, p, ref, hand); len(got) != 0 {
			t.Errorf("%s got %v", what, slices.Collect(maps.Keys(got)))
		}
	}
	// The old rules still hold for kubernetes://: the same Secret by that
	// name needs the CredentialAccess (pending here).
	if got := generate(t, g, push, gatewayOf("gw", "web"), "kubernetes://certs/tls"); len(got) != 0 {
		t.Errorf("kubernetes://certs/tls served without an access decision: %v", got)
	}
	if !slices.Contains(access.calls, "gw/istio-ingressgateway->certs") {
		t.Errorf("kubernetes://certs/tls: access calls %v", access.calls)
	}
}
