package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshpilot/meshpilot/pilot/ca"
)

// testCA issues a serving certificate for 127.0.0.1 and returns it with the root pool.
func testCA(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	b, err := ca.NewSelfSigned(ca.SelfSignedOptions{TTL: time.Hour, Org: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.NewAuthority(b, ca.DefaultPolicy()).IssueServing([]string{"istiod.istio-system.svc", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return *cert, b.RootPool()
}

type recordingValidator struct {
	mu   sync.Mutex
	seen []*admissionv1.AdmissionRequest
}

func (v *recordingValidator) Validate(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seen = append(v.seen, req)
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: "denied " + req.Name}, Warnings: []string{"w1"}}
}

type recordingInjector struct{ params InjectParams }

func (i *recordingInjector) Inject(_ context.Context, _ *admissionv1.AdmissionRequest, p InjectParams) *admissionv1.AdmissionResponse {
	i.params = p
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: []byte(`[]`), PatchType: &pt}
}

// serve starts s on loopback over TLS, waits until it serves, and returns
// an HTTPS client trusting the CA and the base URL.
func serve(t *testing.T, opts Options) (*Server, *http.Client, string) {
	t.Helper()
	cert, roots := testCA(t)
	opts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if opts.ProbeRoots == nil {
		opts.ProbeRoots, opts.ProbeServerName = roots, "istiod.istio-system.svc"
	}
	s := New(opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	t.Cleanup(client.CloseIdleConnections)
	return s, client, "https://" + lis.Addr().String()
}

func reviewBody(t *testing.T, name string) []byte {
	t.Helper()
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("uid-" + name), Name: name, Namespace: "default", Operation: admissionv1.Create,
			Kind: metav1.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService"},
		},
	}
	b, err := json.Marshal(&ar)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(t *testing.T, c *http.Client, url, contentType string, body []byte) (int, string, *admissionv1.AdmissionReview) {
	t.Helper()
	resp, err := c.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, string(raw), nil
	}
	var ar admissionv1.AdmissionReview
	if err := json.Unmarshal(raw, &ar); err != nil {
		t.Fatalf("response is no AdmissionReview: %v: %s", err, raw)
	}
	return resp.StatusCode, string(raw), &ar
}

func TestValidateAnswersWithUIDAndWarnings(t *testing.T) {
	v := &recordingValidator{}
	_, c, base := serve(t, Options{Validator: v})
	status, raw, ar := post(t, c, base+"/validate", "application/json", reviewBody(t, "reviews"))
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, raw)
	}
	if ar.APIVersion != "admission.k8s.io/v1" || ar.Kind != "AdmissionReview" {
		t.Errorf("response type %s %s, want admission.k8s.io/v1 AdmissionReview", ar.APIVersion, ar.Kind)
	}
	r := ar.Response
	if r.UID != "uid-reviews" || r.Allowed || r.Result.Message != "denied reviews" || len(r.Warnings) != 1 {
		t.Errorf("response = %+v, want the validator's answer with the request's UID", r)
	}
	if len(v.seen) != 1 || v.seen[0].Name != "reviews" {
		t.Errorf("validator saw %v", v.seen)
	}
}

func TestBadRequests(t *testing.T) {
	errs := NewValidationHTTPErrors(prometheus.NewRegistry())
	_, c, base := serve(t, Options{Validator: &recordingValidator{}, MaxBodyBytes: 1 << 10, ValidationHTTPErrors: errs})
	big := append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"name":"`), bytes.Repeat([]byte("x"), 2<<10)...)
	big = append(big, `"}}`...)
	for _, tc := range []struct {
		name, contentType string
		body              []byte
		status            int
		says              string
	}{
		{"malformed JSON", "application/json", []byte(`{"apiVersion": "admission.k8s.io/v1", "kind":`), http.StatusBadRequest, "malformed AdmissionReview"},
		{"wrong field type", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`), http.StatusBadRequest, "malformed AdmissionReview"},
		{"empty", "application/json", nil, http.StatusBadRequest, "empty body"},
		{"no request", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest, "has no request"},
		{"v1beta1", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}`), http.StatusBadRequest, `apiVersion "admission.k8s.io/v1beta1"`},
		{"oversized", "application/json", big, http.StatusRequestEntityTooLarge, "larger than 1024 bytes"},
		{"not JSON", "text/plain", reviewBody(t, "x"), http.StatusUnsupportedMediaType, "want application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, raw, _ := post(t, c, base+"/validate", tc.contentType, tc.body)
			if status != tc.status || !strings.Contains(raw, tc.says) {
				t.Errorf("got %d %q, want %d naming %q", status, raw, tc.status, tc.says)
			}
		})
	}
	resp, err := c.Get(base + "/validate")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /validate = %d, want 405", resp.StatusCode)
	}
	for status, want := range map[string]float64{"400": 5, "413": 1, "415": 1, "405": 1} {
		var m dto.Metric
		if err := errs.WithLabelValues(status).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != want {
			t.Errorf("galley_validation_http_error{status=%q} = %v, want %v", status, got, want)
		}
	}
}

func TestInjectPathParameters(t *testing.T) {
	inj := &recordingInjector{}
	_, c, base := serve(t, Options{Injector: inj})
	status, raw, ar := post(t, c, base+"/inject/cluster/east/net/network1", "application/json", reviewBody(t, "pod"))
	if status != http.StatusOK || !ar.Response.Allowed || string(ar.Response.Patch) != "[]" {
		t.Fatalf("status %d: %s", status, raw)
	}
	if inj.params.ClusterID != "east" || inj.params.Network != "network1" {
		t.Errorf("params = %+v, want cluster east, network network1", inj.params)
	}
}

func TestInjectWithoutInjectorAdmitsUnchanged(t *testing.T) {
	_, c, base := serve(t, Options{})
	for _, path := range []string{"/inject", "/inject/", "/inject/cluster/c1"} {
		status, raw, ar := post(t, c, base+path, "application/json", reviewBody(t, "pod"))
		if status != http.StatusOK || !ar.Response.Allowed || ar.Response.Patch != nil || ar.Response.UID != "uid-pod" {
			t.Errorf("%s: %d %s, want allowed without a patch", path, status, raw)
		}
	}
}

func TestParseInjectPath(t *testing.T) {
	for _, tc := range []struct {
		path         string
		cluster, net string
		env          map[string]string
	}{
		{"/inject", "", "", map[string]string{}},
		{"/inject/", "", "", map[string]string{}},
		{"/inject/cluster/c1/net/n1", "c1", "n1", map[string]string{"ISTIO_META_CLUSTER_ID": "c1", "ISTIO_META_NETWORK": "n1"}},
		{"/inject/net/n1/cluster/c1/", "c1", "n1", map[string]string{"ISTIO_META_CLUSTER_ID": "c1", "ISTIO_META_NETWORK": "n1"}},
		{"/inject/cluster/c1/root/a--slash--b/odd", "c1", "", map[string]string{"ISTIO_META_CLUSTER_ID": "c1", "ROOT": "a/b"}},
		{"/inject/:ENV:cluster=c2:ENV:net=n2:ENV:path=/x/y:ENV:=bad", "c2", "n2", map[string]string{"ISTIO_META_CLUSTER_ID": "c2", "ISTIO_META_NETWORK": "n2", "PATH": "/x/y"}},
	} {
		p := ParseInjectPath(tc.path)
		if p.ClusterID != tc.cluster || p.Network != tc.net || !equalMaps(p.Env, tc.env) {
			t.Errorf("ParseInjectPath(%q) = %+v, want cluster %q net %q env %v", tc.path, p, tc.cluster, tc.net, tc.env)
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestServingAfterSelfHandshake(t *testing.T) {
	s, _, _ := serve(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitServing(ctx); err != nil {
		t.Fatal(err)
	}
	if !s.Serving() {
		t.Fatal("Serving() false after WaitServing")
	}
}

// TestNotServingWhileHandshakeFails: a certificate the probe cannot verify
// (here: a root that did not sign it) keeps Serving false, retrying.
func TestNotServingWhileHandshakeFails(t *testing.T) {
	_, otherRoots := testCA(t)
	failures := make(chan struct{}, 16)
	log := slog.New(&notify{on: "admission webhook self-check failed", ch: failures})
	s, _, _ := serve(t, Options{ProbeRoots: otherRoots, ProbeServerName: "istiod.istio-system.svc", Log: log})
	for range 2 {
		select {
		case <-failures:
		case <-time.After(30 * time.Second):
			t.Fatal("no failed self-check logged")
		}
	}
	if s.Serving() {
		t.Fatal("Serving() true although no handshake could be verified")
	}
}

func TestServeBeforeListenerErrorsOnClosedListener(t *testing.T) {
	cert, _ := testCA(t)
	s := New(Options{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	if err := s.Serve(context.Background(), lis); err == nil || errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve on a closed listener = %v, want an error", err)
	}
	if s.Serving() {
		t.Fatal("Serving() true without a listener")
	}
}

// notify is a slog handler that signals each record whose message is on.
type notify struct {
	on string
	ch chan struct{}
}

func (n *notify) Enabled(context.Context, slog.Level) bool { return true }
func (n *notify) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, n.on) {
		select {
		case n.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (n *notify) WithAttrs([]slog.Attr) slog.Handler { return n }
func (n *notify) WithGroup(string) slog.Handler      { return n }

type nilInjector struct{}

func (nilInjector) Inject(context.Context, *admissionv1.AdmissionRequest, InjectParams) *admissionv1.AdmissionResponse {
	return nil
}

// TestNilResponseIs500: a handler bug answers 500, never a panic or an
// empty review the API server would misread.
func TestNilResponseIs500(t *testing.T) {
	_, c, base := serve(t, Options{Injector: nilInjector{}})
	status, raw, _ := post(t, c, base+"/inject", "application/json", reviewBody(t, "pod"))
	if status != http.StatusInternalServerError || !strings.Contains(raw, "no admission response") {
		t.Errorf("got %d %q, want 500", status, raw)
	}
}
