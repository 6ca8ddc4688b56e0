// Package golden compares what a test produces with files checked in
// under its testdata directory, and rewrites them on request.
//
// A test owns one directory of golden files, a Set. Every file the test
// produces is compared with the checked-in copy or, with update (the test
// package's -update flag), written over it. When the test and its subtests
// have ended, any file in the directory that nothing produced is stale: the
// test fails naming it, and with update it is deleted. So a renamed or
// removed input cannot leave an expectation behind that no test reads.
//
// `make golden` runs every golden test with -update; `git status` then
// shows what changed.
package golden

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// hint tells the reader of a failure how to regenerate the golden files.
const hint = "run make golden and review the diff"

// Set is one directory of golden files, owned by one test.
type Set struct {
	dir    string
	update bool

	mu       sync.Mutex
	produced map[string]bool
}

// New returns the golden files in dir for the test t. The stale-file check
// is registered with t.Cleanup, so it runs after t's subtests, parallel
// ones included. It is skipped when t failed (a subtest that stopped early
// produced nothing, which proves nothing about its file) and when a -run
// or -skip pattern may have left subtests out.
func New(t testing.TB, dir string, update bool) *Set {
	t.Helper()
	s := &Set{dir: dir, update: update, produced: map[string]bool{}}
	t.Cleanup(func() {
		t.Helper()
		s.checkStale(t)
	})
	return s
}

// Bytes compares got with the set's file name, a base name; with update
// it writes got there instead. t may be a subtest of the set's test.
func (s *Set) Bytes(t testing.TB, name string, got []byte) {
	t.Helper()
	if name == "" || filepath.Base(name) != name {
		t.Fatalf("golden: file name %q in %s: want a base name without directories", name, s.dir)
		return
	}
	s.mu.Lock()
	dup := s.produced[name]
	s.produced[name] = true
	s.mu.Unlock()
	if dup {
		t.Errorf("golden: %s is produced twice in one run; give each output its own name", filepath.Join(s.dir, name))
	}
	File(t, s.update, filepath.Join(s.dir, name), got)
}

// File compares got with the file at path; with update it writes got
// there instead (creating the directory). It is for a golden file outside
// a Set, which has no stale-file check.
func File(t testing.TB, update bool, path string, got []byte) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("golden: %v", err)
			return
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("golden: %v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden: missing output file: %v; %s", err, hint)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("golden: %s differs from the generated output; %s.\n%s", path, hint, firstDifference(want, got))
	}
}

// firstDifference describes the first line where want and got differ.
func firstDifference(want, got []byte) string {
	w, g := lines(want), lines(got)
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	at := func(lines []string) string {
		if i < len(lines) {
			return fmt.Sprintf("%q", lines[i])
		}
		return "(end of file)"
	}
	return fmt.Sprintf("first difference at line %d (file %d lines, generated %d):\n  file:      %s\n  generated: %s",
		i+1, len(w), len(g), at(w), at(g))
}

// lines splits b after each newline; a final newline ends the last line.
func lines(b []byte) []string {
	l := strings.SplitAfter(string(b), "\n")
	if l[len(l)-1] == "" {
		l = l[:len(l)-1]
	}
	return l
}

// checkStale fails t on each file in the directory that was not produced,
// or with update deletes it.
func (s *Set) checkStale(t testing.TB) {
	t.Helper()
	if t.Failed() {
		t.Logf("golden: stale-file check of %s skipped: the test failed", s.dir)
		return
	}
	if run, skip := flagValue("test.run"), flagValue("test.skip"); mayFilterSubtests(run, skip) {
		t.Logf("golden: stale-file check of %s skipped: -run %q -skip %q may leave subtests out", s.dir, run, skip)
		return
	}
	entries, err := os.ReadDir(s.dir)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatalf("golden: %v", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var stale []string
	for _, e := range entries {
		if !s.produced[e.Name()] {
			stale = append(stale, filepath.Join(s.dir, e.Name()))
		}
	}
	slices.Sort(stale)
	for _, path := range stale {
		if !s.update {
			t.Errorf("golden: %s is stale: no test input produces it; run make golden to delete it", path)
			continue
		}
		if err := os.Remove(path); err != nil {
			t.Errorf("golden: remove stale %s: %v", path, err)
		}
	}
}

// mayFilterSubtests reports whether a -run pattern run or a -skip pattern
// skip can leave out some subtests of a test that runs. The testing
// package splits both at "/" into one pattern per level, so a pattern
// without "/" selects or skips whole top-level tests only.
func mayFilterSubtests(run, skip string) bool {
	return strings.Contains(run, "/") || strings.Contains(skip, "/")
}

// flagValue is the value of the testing flag name, or "" when the binary
// has no such flag.
func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}
