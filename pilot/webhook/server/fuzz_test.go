package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzReview: any body and path a client sends gets an answer the API
// server understands (a review, or a 4xx naming the problem), never a
// panic or a 5xx.
func FuzzReview(f *testing.F) {
	f.Add("/validate", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","name":"x"}}`))
	f.Add("/inject/cluster/c/net/n", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"object":{"kind":"Pod"}}}`))
	f.Add("/inject/:ENV:cluster=a:ENV:=b", []byte(`{"request":null}`))
	f.Add("/validate", []byte(`[`))
	s := New(Options{MaxBodyBytes: 4 << 10})
	h := s.Handler()
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		if len(path) == 0 || path[0] != '/' {
			path = "/" + path
		}
		req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body))
		req.URL.Path = path
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s: status %d: %s", path, rec.Code, rec.Body.String())
		}
		_ = ParseInjectPath(path)
	})
}
