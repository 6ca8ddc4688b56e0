package networkingtest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// recorder is a testing.TB that records Errorf instead of failing.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestGoldenRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out", "a.clusters.yaml")
	a, b := &clusterv3.Cluster{Name: "a"}, &clusterv3.Cluster{Name: "b"}
	nt.Golden(t, true, path, a, b)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "name: a\n---\nname: b\n"; string(raw) != want {
		t.Errorf("written golden file %q, want %q", raw, want)
	}
	ok := &recorder{TB: t}
	nt.Golden(ok, false, path, a, b)
	if len(ok.errors) != 0 {
		t.Errorf("same messages: %v, want no error", ok.errors)
	}
	changed := &recorder{TB: t}
	nt.Golden(changed, false, path, a)
	if len(changed.errors) != 1 {
		t.Errorf("different messages: %d errors, want 1", len(changed.errors))
	}
}

func TestRemoveStaleGoldens(t *testing.T) {
	dir := t.TempDir()
	keep, stale := filepath.Join(dir, "keep.yaml"), filepath.Join(dir, "stale.yaml")
	for _, f := range []string{keep, stale} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	glob := filepath.Join(dir, "*.yaml")
	nt.RemoveStaleGoldens(t, false, glob, map[string]bool{keep: true})
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("without update: %v, want the file kept", err)
	}
	nt.RemoveStaleGoldens(t, true, glob, map[string]bool{keep: true})
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale file after update: %v, want removed", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("kept file: %v", err)
	}
}
