package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// testCAPEM is a self-signed CA certificate, PEM-encoded.
func testCAPEM(t testing.TB) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "backend-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestCACertError checks what a ConfigMap's ca.crt must hold.
func TestCACertError(t *testing.T) {
	ca := testCAPEM(t)
	for _, tc := range []struct {
		name  string
		data  map[string]string
		found bool
		want  string // "" valid, else a part of the error
	}{
		{"valid", map[string]string{"ca.crt": ca}, true, ""},
		{"two certificates", map[string]string{"ca.crt": ca + ca}, true, ""},
		{"not found", nil, false, "not found"},
		{"no ca.crt", map[string]string{"other": ca}, true, "no ca.crt"},
		{"empty ca.crt", map[string]string{"ca.crt": " \n"}, true, "no ca.crt"},
		{"not PEM", map[string]string{"ca.crt": "hello"}, true, "not PEM"},
		{"trailing garbage", map[string]string{"ca.crt": ca + "junk"}, true, "not PEM"},
		{"a key", map[string]string{"ca.crt": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}, true, "not CERTIFICATE"},
		{"bad DER", map[string]string{"ca.crt": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}, true, "certificate 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := gateway.CACertError(tc.data, tc.found)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

const policyGateway = `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: istio
  listeners:
  - {name: web, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: unused, namespace: default}
spec:
  gatewayClassName: istio
  listeners:
  - {name: web, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRefs: [{name: web, port: 8080}]
  - backendRefs: [{name: api, port: 8443}]
`

// policy is a BackendTLSPolicy of namespace default created at minute
// age, with the targetRefs and caCertificateRefs given in YAML flow style.
func policy(name string, minute int, targets, cas string) string {
	return fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: %s, namespace: default, generation: 3, creationTimestamp: "2026-01-01T00:%02d:00Z"}
spec:
  targetRefs: [%s]
  validation:
    hostname: backend.example.com
    caCertificateRefs: [%s]
`, name, minute, targets, cas)
}

// translatePolicies translates policyGateway and docs; Services web (port
// http 8080) and api (ports https 8443, admin 9443) exist in default, and
// ConfigMap default/ca is the only valid CA.
func translatePolicies(t *testing.T, docs string) gateway.Output {
	t.Helper()
	var in gateway.Input
	if err := in.DecodeAll([]byte(classYAML+"---\n"+policyGateway+"---\n"+docs), "default"); err != nil {
		t.Fatal(err)
	}
	in.Service = serviceLookup([]*model.Service{
		nt.KubeService("web", "default", "10.0.0.80", model.Port{Name: "http", Port: 8080}),
		nt.KubeService("api", "default", "10.0.0.81", model.Port{Name: "https", Port: 8443}, model.Port{Name: "admin", Port: 9443}),
	})
	in.ConfigMapCA = func(ns, name string) error {
		if ns == "default" && name == "ca" {
			return nil
		}
		return gateway.CACertError(nil, false)
	}
	return gateway.Translate(in)
}

// policyConds renders a policy's ancestors: "gw: Accepted=... ResolvedRefs=...".
func policyConds(out gateway.Output, name string) string {
	st, ok := out.BackendTLSPolicies[types.NamespacedName{Namespace: "default", Name: name}]
	if !ok {
		return "no status"
	}
	var parts []string
	for _, a := range st.Ancestors {
		gen := ""
		for _, c := range a.Conditions {
			if c.ObservedGeneration != 3 {
				gen = fmt.Sprintf(" (observedGeneration %d)", c.ObservedGeneration)
			}
		}
		parts = append(parts, string(a.AncestorRef.Name)+": "+conditions(a.Conditions)+gen)
	}
	return strings.Join(parts, "; ")
}

const (
	webSvc   = `{group: "", kind: Service, name: web}`
	caRef    = `{group: "", kind: ConfigMap, name: ca}`
	accepted = "gw: Accepted=True/Accepted ResolvedRefs=True/ResolvedRefs"
)

// TestBackendTLSPolicyStatus checks each condition and reason of the
// spec, and the conflicts between policies of one target.
func TestBackendTLSPolicyStatus(t *testing.T) {
	for _, tc := range []struct {
		name, docs string
		want       map[string]string
	}{{
		name: "accepted",
		docs: policy("p", 0, webSvc, caRef),
		want: map[string]string{"p": accepted},
	}, {
		name: "ConfigMap not found",
		docs: policy("p", 0, webSvc, `{group: "", kind: ConfigMap, name: nope}`),
		want: map[string]string{"p": "gw: Accepted=False/NoValidCACertificate ResolvedRefs=False/InvalidCACertificateRef"},
	}, {
		name: "CA of another kind",
		docs: policy("p", 0, webSvc, `{group: "", kind: Secret, name: ca}`),
		want: map[string]string{"p": "gw: Accepted=False/NoValidCACertificate ResolvedRefs=False/InvalidKind"},
	}, {
		name: "one of two CAs invalid",
		docs: policy("p", 0, webSvc, `{group: "", kind: ConfigMap, name: nope}, `+caRef),
		want: map[string]string{"p": "gw: Accepted=True/Accepted ResolvedRefs=False/InvalidCACertificateRef"},
	}, {
		name: "Service not found",
		docs: policy("p", 0, webSvc+`, {group: "", kind: Service, name: gone}`, caRef),
		// The Gateway uses web only: the missing target is not its.
		want: map[string]string{"p": accepted},
	}, {
		name: "no port of that name",
		docs: policy("p", 0, `{group: "", kind: Service, name: web, sectionName: https}`, caRef),
		want: map[string]string{"p": "gw: Accepted=False/TargetNotFound ResolvedRefs=True/ResolvedRefs"},
	}, {
		name: "older wins",
		docs: policy("newer", 2, webSvc, caRef) + "---\n" + policy("older", 1, webSvc, caRef),
		want: map[string]string{"older": accepted, "newer": "gw: Accepted=False/Conflicted ResolvedRefs=True/ResolvedRefs"},
	}, {
		name: "same age: by name",
		docs: policy("b", 1, webSvc, caRef) + "---\n" + policy("a", 1, webSvc, caRef),
		want: map[string]string{"a": accepted, "b": "gw: Accepted=False/Conflicted ResolvedRefs=True/ResolvedRefs"},
	}, {
		name: "same section conflicts, with and without a section do not",
		docs: policy("whole", 1, `{group: "", kind: Service, name: api}`, caRef) + "---\n" +
			policy("https", 2, `{group: "", kind: Service, name: api, sectionName: https}`, caRef) + "---\n" +
			policy("https2", 3, `{group: "", kind: Service, name: api, sectionName: https}`, caRef),
		want: map[string]string{"whole": accepted, "https": accepted, "https2": "gw: Accepted=False/Conflicted ResolvedRefs=True/ResolvedRefs"},
	}, {
		name: "not used by a Gateway",
		docs: policy("p", 0, `{group: "", kind: Service, name: other}`, caRef),
		want: map[string]string{"p": ""},
	}, {
		name: "target of another kind",
		docs: policy("p", 0, webSvc+`, {group: apps, kind: Deployment, name: web}`, caRef),
		want: map[string]string{"p": accepted},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			out := translatePolicies(t, tc.docs)
			for name, want := range tc.want {
				if got := policyConds(out, name); got != want {
					t.Errorf("policy %s: %q, want %q", name, got, want)
				}
			}
		})
	}
}

// TestBackendTLSPolicyWellKnown checks wellKnownCACertificates: System
// takes no credential (the proxy's roots), another value is Invalid and
// blocks the target.
func TestBackendTLSPolicyWellKnown(t *testing.T) {
	doc := func(name, wk string) string {
		return `
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: ` + name + `, namespace: default, generation: 3}
spec:
  targetRefs: [{group: "", kind: Service, name: ` + name + `}]
  validation: {hostname: backend.example.com, wellKnownCACertificates: ` + wk + `}
`
	}
	out := translatePolicies(t, doc("web", "System")+"---\n"+doc("api", "Other"))
	if got := policyConds(out, "web"); got != accepted {
		t.Errorf("System: %q, want %q", got, accepted)
	}
	if got, want := policyConds(out, "api"), "gw: Accepted=False/Invalid ResolvedRefs=True/ResolvedRefs"; got != want {
		t.Errorf("Other: %q, want %q", got, want)
	}
	want := map[string]string{"web": "", "api": gateway.InvalidCredential}
	for svc, cred := range want {
		dr := destinationRule(t, out, svc)
		if got := dr.GetTrafficPolicy().GetTls().GetCredentialName(); got != cred {
			t.Errorf("%s: credentialName %q, want %q", svc, got, cred)
		}
	}
}

// destinationRule returns the DestinationRule translated for Service svc
// of namespace default.
func destinationRule(t *testing.T, out gateway.Output, svc string) *networking.DestinationRule {
	t.Helper()
	for _, c := range out.Configs {
		if c.Kind == model.KindDestinationRule && c.Namespace == "default" && c.Name == svc+"-istio-autogenerated-k8s-gateway" {
			return c.Spec.(*networking.DestinationRule)
		}
	}
	t.Fatalf("no DestinationRule for %s", svc)
	return nil
}

// TestBackendTLSPolicyRule checks the DestinationRule of a Service with a
// policy for the whole Service and one for a port: top-level tls and a
// port setting, SANs of both types (the hostname when none is given), the
// ConfigMap as credential; and that a conflicted policy is not applied.
func TestBackendTLSPolicyRule(t *testing.T) {
	docs := policy("whole", 1, `{group: "", kind: Service, name: api}`, caRef) + "---\n" +
		policy("admin", 2, `{group: "", kind: Service, name: api, sectionName: admin}`, caRef) + "---\n" +
		policy("loser", 3, `{group: "", kind: Service, name: api}`, `{group: "", kind: ConfigMap, name: nope}`) + "---\n" + `
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: sans, namespace: default, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  targetRefs: [{group: "", kind: Service, name: web}]
  validation:
    hostname: web.example.com
    caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}]
    subjectAltNames:
    - {type: Hostname, hostname: web.example.com}
    - {type: URI, uri: "spiffe://td/ns/default/sa/web"}
`
	out := translatePolicies(t, docs)
	api := destinationRule(t, out, "api")
	if got := api.GetHost(); got != "api.default.svc.cluster.local" {
		t.Errorf("host %q", got)
	}
	tls := api.GetTrafficPolicy().GetTls()
	if tls.GetMode() != networking.ClientTLSSettings_SIMPLE || tls.GetSni() != "backend.example.com" || tls.GetCredentialName() != "configmap://default/ca" {
		t.Errorf("top-level tls %v, want SIMPLE, backend.example.com, configmap://default/ca (the older policy's)", tls)
	}
	// No subjectAltNames: the hostname authenticates the backend (spec).
	if got := strings.Join(tls.GetSubjectAltNames(), ","); got != "backend.example.com" {
		t.Errorf("subjectAltNames without any in the policy %q, want the hostname", got)
	}
	pls := api.GetTrafficPolicy().GetPortLevelSettings()
	if len(pls) != 1 || pls[0].GetPort().GetNumber() != 9443 || pls[0].GetTls().GetSni() != "backend.example.com" {
		t.Errorf("port settings %v, want one for port 9443", pls)
	}
	web := destinationRule(t, out, "web").GetTrafficPolicy().GetTls()
	if got := strings.Join(web.GetSubjectAltNames(), ","); got != "web.example.com,spiffe://td/ns/default/sa/web" {
		t.Errorf("subjectAltNames %q", got)
	}
}

// TestBackendTLSPolicyAncestorsBounded checks that a policy used by more
// Gateways than its status can hold lists the first 16 (the CRD's bound).
func TestBackendTLSPolicyAncestorsBounded(t *testing.T) {
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g%02d, namespace: default}
spec:
  gatewayClassName: istio
  listeners: [{name: web, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r%02d, namespace: default}
spec:
  parentRefs: [{name: g%02d}]
  rules: [{backendRefs: [{name: web, port: 8080}]}]
---
`, i, i, i)
	}
	out := translatePolicies(t, b.String()+policy("p", 0, webSvc, caRef))
	st := out.BackendTLSPolicies[types.NamespacedName{Namespace: "default", Name: "p"}]
	if len(st.Ancestors) != 16 {
		t.Fatalf("%d ancestors, want 16", len(st.Ancestors))
	}
	if got := string(st.Ancestors[0].AncestorRef.Name); got != "g00" {
		t.Errorf("first ancestor %s, want g00 (sorted)", got)
	}
}
