package bootstrap_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// TestWebhookServesWithCACertificate: once Start returns, /ready is 200,
// and the webhook port verifies against the CA's root for 127.0.0.1 (a
// --tlsSANs IP) and istiod.NS.svc, and /validate answers with the file
// source's verdict and the current config's warnings.
func TestWebhookServesWithCACertificate(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dr.yaml"), []byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  subsets: [{name: v1, labels: {version: v1}}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.TLSSANs = []string{"127.0.0.1"}
	srv := bootstraptest.Start(t, opts)

	if status, body := get(t, srv.HTTPListenAddr(), "/ready"); status != http.StatusOK {
		t.Fatalf("/ready = %d %q after Start", status, body)
	}
	roots := srv.Authority().Bundle().RootPool()
	for _, name := range []string{"127.0.0.1", "istiod.istio-system.svc", "meshpilot.istio-system.svc"} {
		conn, err := tls.Dial("tcp", srv.HTTPSListenAddr(), &tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Errorf("TLS to the webhook as %s: %v", name, err)
			continue
		}
		conn.Close()
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	review := func(obj string) *admissionv1.AdmissionResponse {
		t.Helper()
		body, err := json.Marshal(&admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID: "1", Name: "r", Namespace: "default", Operation: admissionv1.Create,
				Kind:     metav1.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService"},
				Resource: metav1.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"},
				Object:   runtime.RawExtension{Raw: []byte(obj)},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Post("https://"+srv.HTTPSListenAddr()+"/validate", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out.Response
	}
	bad := review(`{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"r","namespace":"default"},
	  "spec":{"hosts":["reviews"],"http":[{"route":[{"destination":{"host":"reviews"}}],"timeout":"forever"}]}}`)
	if bad.Allowed || !strings.Contains(bad.Result.Message, "spec.http[0].timeout") {
		t.Errorf("invalid VirtualService: %+v", bad.Result)
	}
	warned := review(`{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"r","namespace":"default"},
	  "spec":{"hosts":["reviews"],"http":[{"route":[{"destination":{"host":"reviews","subset":"v2"}}]}]}}`)
	if !warned.Allowed || len(warned.Warnings) == 0 || !strings.Contains(strings.Join(warned.Warnings, "\n"), `subset "v2"`) {
		t.Errorf("VirtualService to an undefined subset: allowed %v, warnings %q", warned.Allowed, warned.Warnings)
	}
	if v := bootstraptest.MetricValue(t, srv, "galley_validation_failed",
		`group="networking.istio.io"`, `reason="invalid_resource"`, `resource="virtualservices"`, `version="v1"`); v != 1 {
		t.Errorf("galley_validation_failed = %v, want 1", v)
	}
}
