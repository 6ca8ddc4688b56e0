package file

import (
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"
)

const (
	tlsSecretDoc = `apiVersion: v1
kind: Secret
metadata: {name: ingress-cert, namespace: istio-system}
type: kubernetes.io/tls
data:
  tls.crt: ` + "Q0VSVA==" + `
  tls.key: ` + "S0VZ" + `
  ca.crt: ` + "Q0E=" + `
`
	genericSecretDoc = `apiVersion: v1
kind: Secret
metadata: {name: generic}
data:
  cert: ` + "T0xE" + `
stringData:
  cert: GCERT
  key: GKEY
  cacert: GCA
`
	// leakedValue is in every bad document; no error or log may show it.
	leakedValue = "SUPERSECRETKEYMATERIAL"
)

// TestSecrets reads a kubernetes.io/tls Secret (base64 data) and a generic
// one (stringData merged over data, namespace default), sorted, with type
// Opaque when unset.
func TestSecrets(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "secrets.yaml", tlsSecretDoc+"---\n"+genericSecretDoc)
	s, err := newTestLoader(dir, testLogger(t)).Load()
	if err != nil {
		t.Fatal(err)
	}
	requireNoErrors(t, s)
	if len(s.Secrets) != 2 || s.Ignored != 0 {
		t.Fatalf("secrets %d ignored %d, want 2 and 0", len(s.Secrets), s.Ignored)
	}
	gen, tls := s.Secrets[0], s.Secrets[1]
	if gen.Namespace != "default" || gen.Name != "generic" || gen.Type != "Opaque" || gen.StringData != nil {
		t.Errorf("generic Secret %s/%s type %q stringData %v", gen.Namespace, gen.Name, gen.Type, gen.StringData)
	}
	for k, want := range map[string]string{"cert": "GCERT", "key": "GKEY", "cacert": "GCA"} {
		if got := string(gen.Data[k]); got != want {
			t.Errorf("generic data[%s] = %q, want %q", k, got, want)
		}
	}
	if tls.Namespace != "istio-system" || string(tls.Data["tls.crt"]) != "CERT" || string(tls.Data["tls.key"]) != "KEY" || string(tls.Data["ca.crt"]) != "CA" {
		t.Errorf("tls Secret %s/%s data %v", tls.Namespace, tls.Name, tls.Data)
	}
}

// TestSecretErrors: each bad Secret is an error naming the file, document,
// object and field, the last good version stays, and neither the error nor
// the log shows the Secret's values.
func TestSecretErrors(t *testing.T) {
	secretKey := base64.StdEncoding.EncodeToString([]byte(leakedValue))
	cases := []struct{ name, doc, field, want string }{
		{"tls without tls.key", `apiVersion: v1
kind: Secret
metadata: {name: ingress-cert, namespace: istio-system}
type: kubernetes.io/tls
stringData:
  tls.crt: ` + leakedValue + `
`, `data["tls.key"]`, "required for type kubernetes.io/tls"},
		{"bad base64", `apiVersion: v1
kind: Secret
metadata: {name: ingress-cert, namespace: istio-system}
type: kubernetes.io/tls
data:
  tls.crt: "` + leakedValue + `!!"
  tls.key: ` + secretKey + `
`, "", "base64"},
		{"unknown field", `apiVersion: v1
kind: Secret
metadata: {name: ingress-cert, namespace: istio-system}
type: kubernetes.io/tls
spec: {x: 1}
data:
  tls.crt: ` + secretKey + `
  tls.key: ` + secretKey + `
`, "spec", "unknown field"},
		{"bad key", `apiVersion: v1
kind: Secret
metadata: {name: ingress-cert, namespace: istio-system}
stringData:
  "tls crt": ` + leakedValue + `
`, `data["tls crt"]`, "alphanumerics"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs strings.Builder
			l := newTestLoader(dir, slog.New(slog.NewTextHandler(&logs, nil)))
			writeFile(t, dir, "s.yaml", tlsSecretDoc)
			if _, err := l.Load(); err != nil {
				t.Fatal(err)
			}
			writeFile(t, dir, "s.yaml", tc.doc)
			s, err := l.Load()
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Errors) != 1 {
				t.Fatalf("errors %v, want 1", s.Errors)
			}
			e := s.Errors[0]
			if e.File != "s.yaml" || e.Index != 0 || e.Kind != "Secret" || e.Namespace != "istio-system" || e.Name != "ingress-cert" ||
				(tc.field != "" && e.Field != tc.field) || !strings.Contains(e.Error(), tc.want) {
				t.Errorf("error %+v (%v), want field %q and %q", e, e, tc.field, tc.want)
			}
			if len(s.Secrets) != 1 || string(s.Secrets[0].Data["tls.crt"]) != "CERT" {
				t.Errorf("last good Secret not kept: %v", s.Secrets)
			}
			for what, text := range map[string]string{"error": e.Error(), "log": logs.String()} {
				if strings.Contains(text, leakedValue) || strings.Contains(text, secretKey) {
					t.Errorf("%s shows the Secret's value: %s", what, text)
				}
			}
		})
	}
}
