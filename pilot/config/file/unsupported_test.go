package file

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

const tcpVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: mongo
spec:
  hosts:
  - mongo
  tcp:
  - match:
    - port: 27017
      sourceSubnet: 10.0.0.0/8
    route:
    - destination:
        host: mongo
`

func unsupportedWarnings(rec *recorder) []map[string]string {
	var out []map[string]string
	for _, w := range rec.warnings() {
		if w["msg"] == "config field not applied" {
			out = append(out, w)
		}
	}
	return out
}

func TestLoaderWarnsUnsupportedFieldOncePerVersion(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "reviews.yaml", reviewsVS)
	writeFile(t, dir, "mongo.yaml", tcpVS)
	rec := &recorder{}
	l := newTestLoader(dir, slog.New(rec))

	snap, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	if snap.UnsupportedFields != 1 {
		t.Errorf("UnsupportedFields = %d, want 1", snap.UnsupportedFields)
	}
	ws := unsupportedWarnings(rec)
	if len(ws) != 1 {
		t.Fatalf("got %d unsupported-field warnings, want 1: %v", len(ws), ws)
	}
	want := map[string]string{"kind": "VirtualService", "namespace": "default", "name": "mongo",
		"field": "spec.tcp[0].match[0].sourceSubnet", "support": "not supported", "origin": "mongo.yaml#0"}
	for k, v := range want {
		if ws[0][k] != v {
			t.Errorf("warning %s = %q, want %q (%v)", k, ws[0][k], v, ws[0])
		}
	}

	// The same content again: no new line.
	if _, err := l.Load(); err != nil {
		t.Fatal(err)
	}
	if n := len(unsupportedWarnings(rec)); n != 1 {
		t.Errorf("after an unchanged reload: %d warnings, want still 1", n)
	}

	// A new version of the object is reported again; removing it clears the count.
	writeFile(t, dir, "mongo.yaml", tcpVS+"  exportTo:\n  - \".\"\n")
	if _, err := l.Load(); err != nil {
		t.Fatal(err)
	}
	if n := len(unsupportedWarnings(rec)); n != 2 {
		t.Errorf("after a change: %d warnings, want 2", n)
	}
	if err := os.Remove(filepath.Join(dir, "mongo.yaml")); err != nil {
		t.Fatal(err)
	}
	snap, err = l.Load()
	if err != nil {
		t.Fatal(err)
	}
	if snap.UnsupportedFields != 0 {
		t.Errorf("after removal UnsupportedFields = %d, want 0", snap.UnsupportedFields)
	}
}
