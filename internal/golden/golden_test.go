package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
)

// recorder is a testing.TB that records failures instead of failing, and
// holds its cleanups until end is called.
type recorder struct {
	testing.TB
	errors   []string
	cleanups []func()
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// Fatalf records like Errorf; the code under test returns after it.
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }
func (r *recorder) Logf(string, ...any)               {}
func (r *recorder) Failed() bool                      { return len(r.errors) > 0 }
func (r *recorder) Cleanup(f func())                  { r.cleanups = append(r.cleanups, f) }

// end runs the cleanups, last registered first, as the testing package does.
func (r *recorder) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// wantErrors fails t unless r recorded exactly one error per entry of
// want, each containing every string of its entry.
func wantErrors(t *testing.T, what string, r *recorder, want ...[]string) {
	t.Helper()
	if len(r.errors) != len(want) {
		t.Fatalf("%s: errors %q, want %d", what, r.errors, len(want))
	}
	for i, parts := range want {
		for _, p := range parts {
			if !strings.Contains(r.errors[i], p) {
				t.Errorf("%s: error %q does not say %q", what, r.errors[i], p)
			}
		}
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

func TestUpdateWritesThenCompares(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	a, b := &clusterv3.Cluster{Name: "a"}, &clusterv3.Cluster{Name: "b"}

	w := &recorder{TB: t}
	New(w, dir, true).Messages(w, "a.clusters.yaml", a, b)
	w.end()
	wantErrors(t, "update", w)
	raw, err := os.ReadFile(filepath.Join(dir, "a.clusters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "name: a\n---\nname: b\n"; string(raw) != want {
		t.Errorf("written golden file %q, want %q", raw, want)
	}

	same := &recorder{TB: t}
	New(same, dir, false).Messages(same, "a.clusters.yaml", a, b)
	same.end()
	wantErrors(t, "same messages", same)

	changed := &recorder{TB: t}
	New(changed, dir, false).Messages(changed, "a.clusters.yaml", a)
	changed.end()
	wantErrors(t, "one message fewer", changed,
		[]string{"a.clusters.yaml differs", "make golden", "line 2 (file 3 lines, generated 1)", `"---\n"`, "(end of file)"})
}

func TestMissingFile(t *testing.T) {
	dir := t.TempDir()
	r := &recorder{TB: t}
	New(r, dir, false).Bytes(r, "gone.yaml", []byte("x: 1\n"))
	r.end()
	wantErrors(t, "missing", r, []string{"missing output file", "gone.yaml", "make golden"})
}

// An output with no messages has a golden file that says so, compared
// like any other.
func TestEmptyOutputIsCompared(t *testing.T) {
	dir := t.TempDir()
	w := &recorder{TB: t}
	New(w, dir, true).Messages(w, "none.yaml")
	w.end()
	wantErrors(t, "update", w)
	raw, err := os.ReadFile(filepath.Join(dir, "none.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != Empty {
		t.Errorf("golden file of no messages %q, want %q", raw, Empty)
	}

	same := &recorder{TB: t}
	New(same, dir, false).Messages(same, "none.yaml")
	same.end()
	wantErrors(t, "still empty", same)

	grown := &recorder{TB: t}
	New(grown, dir, false).Messages(grown, "none.yaml", &clusterv3.Cluster{Name: "a"})
	grown.end()
	wantErrors(t, "no longer empty", grown, []string{"none.yaml differs"})

	// And the other way: a build that stops producing fails.
	writeFiles(t, dir, map[string]string{"some.yaml": "name: a\n"})
	shrunk := &recorder{TB: t}
	New(shrunk, dir, false).Messages(shrunk, "some.yaml")
	shrunk.end()
	wantErrors(t, "now empty", shrunk, []string{"some.yaml differs"})
}

func TestStaleFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"keep.yaml": "k\n", "stale.yaml": "s\n", "old.txt": "o\n"})

	r := &recorder{TB: t}
	New(r, dir, false).Bytes(r, "keep.yaml", []byte("k\n"))
	wantErrors(t, "before the test ends", r)
	r.end()
	wantErrors(t, "stale", r,
		[]string{filepath.Join(dir, "old.txt"), "stale", "make golden"},
		[]string{filepath.Join(dir, "stale.yaml"), "stale", "make golden"})
	if !exists(t, filepath.Join(dir, "stale.yaml")) {
		t.Error("stale file deleted without update")
	}

	u := &recorder{TB: t}
	New(u, dir, true).Bytes(u, "keep.yaml", []byte("k\n"))
	u.end()
	wantErrors(t, "update", u)
	for name, want := range map[string]bool{"keep.yaml": true, "stale.yaml": false, "old.txt": false} {
		if got := exists(t, filepath.Join(dir, name)); got != want {
			t.Errorf("after update: %s exists %v, want %v", name, got, want)
		}
	}
}

// A test that failed may have stopped before producing a file; its golden
// file is neither reported stale nor deleted.
func TestStaleCheckSkippedWhenTheTestFailed(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.yaml": "a\n", "b.yaml": "b\n"})
	r := &recorder{TB: t}
	New(r, dir, true).Bytes(r, "a.yaml", []byte("a\n"))
	r.Errorf("b: build failed")
	r.end()
	wantErrors(t, "failed test", r, []string{"b: build failed"})
	if !exists(t, filepath.Join(dir, "b.yaml")) {
		t.Error("golden file of the failed subtest deleted")
	}
}

func TestNoDirectoryHasNoStaleFiles(t *testing.T) {
	r := &recorder{TB: t}
	New(r, filepath.Join(t.TempDir(), "none"), false)
	r.end()
	wantErrors(t, "no directory", r)
}

func TestNamesAreCheckedOnce(t *testing.T) {
	dir := t.TempDir()
	r := &recorder{TB: t}
	s := New(r, dir, true)
	s.Bytes(r, "a.yaml", nil)
	s.Bytes(r, "a.yaml", nil)
	s.Bytes(r, "sub/b.yaml", nil)
	r.end()
	wantErrors(t, "names", r, []string{"a.yaml is produced twice"}, []string{`"sub/b.yaml"`, "base name"})
}

func TestMayFilterSubtests(t *testing.T) {
	for _, tc := range []struct {
		run, skip string
		want      bool
	}{
		{"", "", false},
		{"^TestGolden$", "", false},
		{"TestGolden|TestTLSRouteGolden", "", false},
		{"", "TestOther", false},
		{"TestGolden/https", "", true},
		{"TestA|TestGolden/x", "", true},
		{"", "TestGolden/tcp", true},
	} {
		if got := mayFilterSubtests(tc.run, tc.skip); got != tc.want {
			t.Errorf("-run %q -skip %q: may filter subtests %v, want %v", tc.run, tc.skip, got, tc.want)
		}
	}
}
