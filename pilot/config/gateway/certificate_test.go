package gateway_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
)

// TestInvalidCertificateRef mirrors the conformance test
// GatewayInvalidTLSConfiguration: a listener whose certificateRef is a
// Secret that does not exist, or that holds no valid certificate and key
// ("Hello world" as both), has ResolvedRefs False with reason
// InvalidCertificateRef and is not Programmed; a valid pair resolves.
// Input.Secret is built on CertificateError, as pilot-discovery builds it.
func TestInvalidCertificateRef(t *testing.T) {
	crt, key := testutil.SelfSignedCert(t, "example.com")
	secrets := map[string]*corev1.Secret{
		"good":      {ObjectMeta: metav1.ObjectMeta{Name: "good"}, Data: map[string][]byte{"tls.crt": crt, "tls.key": key}},
		"istio":     {ObjectMeta: metav1.ObjectMeta{Name: "istio"}, Data: map[string][]byte{"cert": crt, "key": key}},
		"malformed": {ObjectMeta: metav1.ObjectMeta{Name: "malformed"}, Data: map[string][]byte{"tls.crt": []byte("Hello world\n"), "tls.key": []byte("Hello world\n")}},
		"empty":     {ObjectMeta: metav1.ObjectMeta{Name: "empty"}},
	}
	var in gateway.Input
	if err := in.DecodeAll([]byte(classYAML+`---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: istio
  listeners:
  - {name: good, port: 443, protocol: HTTPS, hostname: good.example.com, tls: {certificateRefs: [{name: good}]}}
  - {name: istio, port: 443, protocol: HTTPS, hostname: istio.example.com, tls: {certificateRefs: [{name: istio}]}}
  - {name: malformed, port: 443, protocol: HTTPS, hostname: malformed.example.com, tls: {certificateRefs: [{name: malformed}]}}
  - {name: empty, port: 443, protocol: HTTPS, hostname: empty.example.com, tls: {certificateRefs: [{name: empty}]}}
  - {name: missing, port: 443, protocol: HTTPS, hostname: missing.example.com, tls: {certificateRefs: [{name: does-not-exist}]}}
`), "default"); err != nil {
		t.Fatal(err)
	}
	in.Secret = func(ns, name string) bool { return gateway.CertificateError(secrets[name]) == nil }
	got := listenerConds(t, gateway.Translate(in), "default", "gw")
	const ok = "Accepted=True/Accepted Programmed=True/Programmed ResolvedRefs=True/ResolvedRefs Conflicted=False/NoConflicts"
	const bad = "Accepted=True/Accepted Programmed=False/Invalid ResolvedRefs=False/InvalidCertificateRef Conflicted=False/NoConflicts"
	want := map[string]string{"good": ok, "istio": ok, "malformed": bad, "empty": bad, "missing": bad}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("listener %s:\n got %s\nwant %s", name, got[name], w)
		}
	}
}
