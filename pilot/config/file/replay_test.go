package file

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/model"
)

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
`

// age sets the modification time of dir/rel to when, so its read is
// trusted (not racy) at the next load.
func age(t *testing.T, dir, rel string, when time.Time) {
	t.Helper()
	if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(rel)), when, when); err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, l *Loader) *Snapshot {
	t.Helper()
	s, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// matchesFresh fails unless got is what a fresh Loader of dir reads.
func matchesFresh(t *testing.T, dir string, got *Snapshot) {
	t.Helper()
	sameSnapshot(t, "replayed vs fresh load", got, mustLoad(t, dir))
}

func TestUnchangedFileIsNotReadAgain(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "vs.yaml", reviewsVS+"---\n"+deployment)
	writeFile(t, dir, "dr.yaml", reviewsDR)
	old := time.Now().Add(-time.Hour)
	age(t, dir, "vs.yaml", old)
	age(t, dir, "dr.yaml", old)
	l := newTestLoader(dir, testLogger(t))
	first := load(t, l)
	if first.Replayed != 0 || first.Decoded != 3 {
		t.Fatalf("first load: replayed %d, decoded %d; want 0, 3", first.Replayed, first.Decoded)
	}
	second := load(t, l)
	if second.Replayed != 2 || second.Decoded != 0 || second.Files != 2 || second.Ignored != 1 {
		t.Fatalf("second load: replayed %d, decoded %d, files %d, ignored %d; want 2, 0, 2, 1",
			second.Replayed, second.Decoded, second.Files, second.Ignored)
	}
	for i := range first.Configs {
		if first.Configs[i].Spec != second.Configs[i].Spec || first.Configs[i].Generation != second.Configs[i].Generation {
			t.Errorf("config %s changed at a replay", first.Configs[i].Name)
		}
	}
	matchesFresh(t, dir, second)
}

func TestRecentlyChangedFileIsReadAgain(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "vs.yaml", reviewsVS)
	l := newTestLoader(dir, testLogger(t))
	load(t, l)
	// Changed less than racyWindow before the load: a rewrite within the
	// same clock tick could keep its identity, so it is read again.
	if s := load(t, l); s.Replayed != 0 || s.Files != 1 {
		t.Fatalf("replayed %d of %d files, want 0 of 1", s.Replayed, s.Files)
	}
}

func TestInPlaceRewriteWithSameSizeAndTime(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "vs.yaml", withWeights(80, 20))
	old := time.Now().Add(-time.Hour)
	age(t, dir, "vs.yaml", old)
	l := newTestLoader(dir, testLogger(t))
	load(t, l)
	if s := load(t, l); s.Replayed != 1 {
		t.Fatalf("replayed %d, want 1", s.Replayed)
	}
	// Same inode, size and mtime: only the change time tells.
	f, err := os.OpenFile(filepath.Join(dir, "vs.yaml"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(withWeights(70, 30)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	age(t, dir, "vs.yaml", old)
	s := load(t, l)
	if s.Replayed != 0 {
		t.Errorf("replayed %d, want 0", s.Replayed)
	}
	if c := find(s, model.KindVirtualService, "reviews"); c == nil || firstWeight(c) != 70 {
		t.Fatalf("in-place rewrite missed: %+v", c)
	}
	matchesFresh(t, dir, s)
}

func TestRenamedAndDeletedFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", reviewsVS)
	writeFile(t, dir, "b.yaml", reviewsDR)
	old := time.Now().Add(-time.Hour)
	age(t, dir, "a.yaml", old)
	age(t, dir, "b.yaml", old)
	l := newTestLoader(dir, testLogger(t))
	load(t, l)
	if s := load(t, l); s.Replayed != 2 {
		t.Fatalf("replayed %d, want 2", s.Replayed)
	}
	// A rename keeps the inode and times; the path is new, so it is read.
	if err := os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	s := load(t, l)
	if s.Replayed != 1 || s.Files != 2 {
		t.Errorf("after rename: replayed %d of %d files, want 1 of 2", s.Replayed, s.Files)
	}
	if c := find(s, model.KindVirtualService, "reviews"); c == nil || c.Source != "c.yaml#0" {
		t.Fatalf("renamed file's object: %+v", c)
	}
	matchesFresh(t, dir, s)
	if err := os.Remove(filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	s = load(t, l)
	if find(s, model.KindVirtualService, "reviews") != nil || len(s.Configs) != 1 || s.Replayed != 1 {
		t.Fatalf("after delete: %d configs, replayed %d; want only the DestinationRule, replayed", len(s.Configs), s.Replayed)
	}
	matchesFresh(t, dir, s)
}

// TestConfigMapSymlinkSwap follows a Kubernetes ConfigMap volume: keys are
// links through ..data, a link to a timestamped directory that an update
// replaces atomically.
func TestConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	writeFile(t, dir, "..2026_11_25_1/vs.yaml", withWeights(80, 20))
	age(t, dir, "..2026_11_25_1/vs.yaml", old)
	if err := os.Symlink("..2026_11_25_1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/vs.yaml", filepath.Join(dir, "vs.yaml")); err != nil {
		t.Fatal(err)
	}
	l := newTestLoader(dir, testLogger(t))
	load(t, l)
	if s := load(t, l); s.Replayed != 1 || s.Files != 1 {
		t.Fatalf("replayed %d of %d files, want 1 of 1", s.Replayed, s.Files)
	}
	// The new version has the same size and modification time.
	writeFile(t, dir, "..2026_11_25_2/vs.yaml", withWeights(70, 30))
	age(t, dir, "..2026_11_25_2/vs.yaml", old)
	if err := os.Symlink("..2026_11_25_2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_25_1")); err != nil {
		t.Fatal(err)
	}
	s := load(t, l)
	if s.Replayed != 0 {
		t.Errorf("replayed %d, want 0", s.Replayed)
	}
	if c := find(s, model.KindVirtualService, "reviews"); c == nil || firstWeight(c) != 70 {
		t.Fatalf("symlink swap missed: %+v", c)
	}
	matchesFresh(t, dir, s)
}

// TestFileInErrorIsReadAgain: a read with errors or retained objects is
// never replayed, so its errors are reported at every load as before.
func TestFileInErrorIsReadAgain(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "vs.yaml", reviewsVS)
	old := time.Now().Add(-time.Hour)
	age(t, dir, "vs.yaml", old)
	l := newTestLoader(dir, testLogger(t))
	load(t, l)
	writeFile(t, dir, "vs.yaml", withWeights(80, 120))
	age(t, dir, "vs.yaml", old)
	for i := range 2 {
		s := load(t, l)
		if s.Replayed != 0 || len(s.Errors) != 1 || len(s.Configs) != 1 {
			t.Fatalf("load %d: replayed %d, %d errors, %d configs; want 0, 1, 1 (the last good one)", i, s.Replayed, len(s.Errors), len(s.Configs))
		}
	}
}

// TestRandomEditsMatchFreshLoads edits, renames and deletes files at
// random, some aged (replayable) and some fresh, and checks each load of
// one Loader against a fresh Loader of the same directory. Files define
// disjoint names and no document is in error, so the last good versions
// and duplicate incumbents a Loader remembers play no part.
func TestRandomEditsMatchFreshLoads(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 25))
	old := time.Now().Add(-time.Hour)
	l := newTestLoader(dir, nil)
	content := func(file int) string {
		var b strings.Builder
		for i := range 1 + rng.IntN(3) {
			if rng.IntN(5) == 0 {
				b.WriteString(deployment + "---\n")
			}
			w := 80 - 10*rng.IntN(3)
			vs := strings.Replace(withWeights(w, 100-w), "name: reviews", fmt.Sprintf("name: f%d-vs%d", file, i), 1)
			b.WriteString(vs + "---\n")
		}
		return b.String()
	}
	name := func(file int) string { return fmt.Sprintf("d%d/f%d.yaml", file%2, file) }
	replayed := 0
	for round := range 60 {
		for range 1 + rng.IntN(2) {
			f := rng.IntN(6)
			path := filepath.Join(dir, filepath.FromSlash(name(f)))
			switch rng.IntN(4) {
			case 0:
				_ = os.Remove(path)
			case 1:
				// Rename to another file's name (its objects move).
				g := rng.IntN(6)
				if _, err := os.Stat(path); err == nil && g != f {
					_ = os.Remove(filepath.Join(dir, filepath.FromSlash(name(g))))
					writeFile(t, dir, name(g), content(g))
					_ = os.Remove(path)
				}
			default:
				writeFile(t, dir, name(f), content(f))
				if rng.IntN(2) == 0 {
					age(t, dir, name(f), old)
				}
			}
		}
		got := load(t, l)
		replayed += got.Replayed
		if len(got.Errors) != 0 {
			t.Fatalf("round %d: errors %q", round, errorTexts(got))
		}
		sameSnapshot(t, fmt.Sprintf("round %d", round), got, mustLoad(t, dir))
		if t.Failed() {
			t.FailNow()
		}
	}
	if replayed == 0 {
		t.Error("no file was replayed")
	}
}
