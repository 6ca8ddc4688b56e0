package file

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/model"
)

// allocated returns the bytes allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestFileSizeCap: a file over the cap is not read; it is reported with its
// size and the cap, and its last good objects stay.
func TestFileSizeCap(t *testing.T) {
	dir := t.TempDir()
	l := NewLoaderWithOptions(dir, testLogger(t), Options{MaxFileSize: 4096})
	writeFile(t, dir, "vs.yaml", reviewsVS)
	requireNoErrors(t, loadStep(t, l))

	big := withWeights(50, 50) + "# " + strings.Repeat("x", 5000) + "\n"
	writeFile(t, dir, "vs.yaml", big)
	writeFile(t, dir, "new.yaml", big)
	s := loadStep(t, l)
	want := []string{
		fmt.Sprintf("new.yaml: file is %d bytes, over the 4096-byte limit", len(big)),
		fmt.Sprintf("vs.yaml: file is %d bytes, over the 4096-byte limit; keeping the 1 object it defined", len(big)),
	}
	if got := errorTexts(s); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors\n got: %q\nwant: %q", got, want)
	}
	if c := find(s, model.KindVirtualService, "reviews"); c == nil || firstWeight(c) != 80 || c.Source != "vs.yaml#0" {
		t.Errorf("the last good VirtualService is not served: %v", c)
	}
}

// TestDefaultFileSizeCap: without options the cap is DefaultMaxFileSize; a
// (sparse) file one byte over it is refused unread.
func TestDefaultFileSizeCap(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "huge.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(DefaultMaxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var s *Snapshot
	alloc := allocated(func() { s = mustLoad(t, dir) })
	want := fmt.Sprintf("huge.yaml: file is %d bytes, over the %d-byte limit", DefaultMaxFileSize+1, DefaultMaxFileSize)
	if got := errorTexts(s); len(got) != 1 || got[0] != want {
		t.Errorf("errors = %q, want %q", got, want)
	}
	if alloc > 1<<20 {
		t.Errorf("Load allocated %d bytes for a file it must not read", alloc)
	}
}

// laughsVS is a VirtualService carrying lol, a billion laughs, in its spec.
func laughsVS(lol string) string {
	return "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: laughs}\nspec:\n  hosts: [laughs]\n  lol:\n" +
		"    " + strings.ReplaceAll(strings.TrimSuffix(lol, "\n"), "\n", "\n    ") + "\n"
}

// bombs are billion laughs of 200-400 KB: nine levels of many small nodes
// (flow and block layouts), which the decoder's own alias cap stops after
// allocating 20-30 MB, and two levels of large leaves after enough plain
// nodes to pass that cap, which expand to 870 MB of JSON.
var bombs = []struct{ name, lol string }{
	{"flow", laughs(9, 6000, "lol", false)},
	{"block", laughs(9, 3000, "lol", true)},
	{"large leaves", "pad: [" + strings.Repeat("0,", 5000) + "0]\n" + laughs(2, 70, strings.Repeat("lol ", 625), false)},
}

// TestBillionLaughs: a document of nested aliases is refused with a clear
// error, allocating a few times its size at most, and the last good
// version of its object stays.
func TestBillionLaughs(t *testing.T) {
	for _, bc := range bombs {
		t.Run(bc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "vs.yaml", strings.Replace(reviewsVS, "name: reviews", "name: laughs", 1))
			rec := &recorder{}
			l := newTestLoader(dir, slog.New(rec))
			requireNoErrors(t, loadStep(t, l))

			bomb := laughsVS(bc.lol)
			writeFile(t, dir, "vs.yaml", bomb)
			var s *Snapshot
			alloc := allocated(func() { s = loadStep(t, l) })
			t.Logf("Load of a %d-byte billion laughs allocated %d bytes", len(bomb), alloc)
			if bound := uint64(4*len(bomb) + 256<<10); alloc > bound {
				t.Errorf("Load of a %d-byte billion laughs allocated %d bytes, want at most %d", len(bomb), alloc, bound)
			}
			if len(s.Errors) != 1 || !errors.Is(s.Errors[0], errAliasExpansion) {
				t.Fatalf("errors = %v, want the alias expansion refused", errorTexts(s))
			}
			want := fmt.Sprintf("vs.yaml#0 VirtualService default/laughs: YAML aliases expand the document too far: its %d bytes expand to more than %d (the limit is 8 times a document's size, at least 4096)",
				len(bomb), aliasLimit(len(bomb)))
			if got := s.Errors[0].Error(); got != want {
				t.Errorf("error\n got: %s\nwant: %s", got, want)
			}
			if c := find(s, model.KindVirtualService, "laughs"); c == nil || firstWeight(c) != 80 {
				t.Errorf("the last good version is not served: %v", c)
			}
			// Unchanged, it is neither decoded nor logged again.
			alloc = allocated(func() { s = loadStep(t, l) })
			if s.Decoded != 0 || len(s.Errors) != 1 || alloc > uint64(2*len(bomb)) {
				t.Errorf("reload: decoded %d, errors %v, allocated %d", s.Decoded, errorTexts(s), alloc)
			}
			if n := len(rec.warnings()); n != 1 {
				t.Errorf("%d warnings, want 1", n)
			}
		})
	}
}

// TestAliasesWithinBounds: ordinary use of anchors and merge keys decodes.
func TestAliasesWithinBounds(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "dr.yaml", `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews}
spec:
  host: reviews
  trafficPolicy: &policy
    connectionPool: {tcp: {maxConnections: 10}}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy: *policy
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      <<: *policy
      tls: {mode: ISTIO_MUTUAL}
`)
	s := mustLoad(t, dir)
	requireNoErrors(t, s)
	if len(s.Configs) != 1 {
		t.Fatalf("configs = %v", s.Configs)
	}
}

// TestIgnoredKindsAreNotDecoded: a document of a kind the loader does not
// read is known by its header; what follows is not decoded, be it a billion
// laughs or broken YAML.
func TestIgnoredKindsAreNotDecoded(t *testing.T) {
	dir := t.TempDir()
	bomb := strings.Replace(laughsVS(bombs[0].lol), "networking.istio.io/v1\nkind: VirtualService", "apps/v1\nkind: Deployment", 1)
	writeFile(t, dir, "deploy.yaml", bomb+"---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa}\nbroken: [\n")
	var s *Snapshot
	alloc := allocated(func() { s = mustLoad(t, dir) })
	requireNoErrors(t, s)
	if s.Ignored != 2 {
		t.Errorf("Ignored = %d, want 2", s.Ignored)
	}
	if bound := uint64(2*len(bomb) + 256<<10); alloc > bound {
		t.Errorf("Load allocated %d bytes, want at most %d", alloc, bound)
	}
}

// TestFailedDocumentsAreNotDecodedAgain: an unchanged document in error is
// not decoded again; its error stays, logged once.
func TestFailedDocumentsAreNotDecodedAgain(t *testing.T) {
	dir := t.TempDir()
	bad := strings.Replace(reviewsVS, "weight: 20", "weight: 120", 1)
	writeFile(t, dir, "vs.yaml", reviewsDR+"---\n"+bad+"---\n{{{\n")
	rec := &recorder{}
	l := newTestLoader(dir, slog.New(rec))
	first := loadStep(t, l)
	if first.Decoded != 3 || len(first.Errors) != 2 {
		t.Fatalf("first load: decoded %d, errors %v", first.Decoded, errorTexts(first))
	}
	// Rewritten with the same content: nothing to decode.
	writeFile(t, dir, "vs.yaml", reviewsDR+"---\n"+bad+"---\n{{{\n")
	again := loadStep(t, l)
	if again.Decoded != 0 || strings.Join(errorTexts(again), "\n") != strings.Join(errorTexts(first), "\n") {
		t.Errorf("reload: decoded %d, errors %v; want 0 and %v", again.Decoded, errorTexts(again), errorTexts(first))
	}
	// The same documents a line lower: decoded again, as errors name lines.
	writeFile(t, dir, "vs.yaml", "# first\n"+reviewsDR+"---\n"+bad+"---\n{{{\n")
	moved := loadStep(t, l)
	if moved.Decoded != 3 || len(moved.Errors) != 2 || moved.Errors[1].Error() == first.Errors[1].Error() {
		t.Errorf("after a move: decoded %d, errors %v", moved.Decoded, errorTexts(moved))
	}
	if n := len(rec.warnings()); n != 3 {
		t.Errorf("%d warnings, want 3 (two errors, then the moved one)", n)
	}
}
