package file

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/model"
)

// errorTexts returns the text of a snapshot's errors.
func errorTexts(s *Snapshot) []string {
	var out []string
	for _, e := range s.Errors {
		out = append(out, e.Error())
	}
	return out
}

// TestNonAtomicEditKeepsLastGood replays a non-atomic rewrite of a file
// (truncate, then write a bad version, then a good one without one of its
// objects): its objects stay at their last good version until the file reads
// cleanly without them.
func TestNonAtomicEditKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	l := newTestLoader(dir, testLogger(t))
	writeFile(t, dir, "vs.yaml", reviewsDR+"---\n"+reviewsVS)
	good := loadStep(t, l)
	requireNoErrors(t, good)
	goodVS := find(good, model.KindVirtualService, "reviews")

	steps := []struct {
		name, content string
		want          []string // errors
	}{
		{"truncated", "", []string{"vs.yaml: file is empty; keeping the 2 objects it defined"}},
		{"blank", "\n  \n", []string{"vs.yaml: file is empty; keeping the 2 objects it defined"}},
		{"comments only", "# rewritten below\n---\n", []string{
			"vs.yaml: file has no YAML documents, only comments or separators; keeping the 2 objects it defined"}},
		{"half written", reviewsDR + "---\n" + reviewsVS[:strings.Index(reviewsVS, "  http:")] + "  http:\n  - route:\n    - destination: {host: [\n", []string{
			"vs.yaml#1 VirtualService default/reviews: invalid YAML: yaml: line 22: did not find expected node content"}},
		{"first document only, second one bad", reviewsDR + "---\n{{{\n", []string{
			"vs.yaml#1: invalid YAML: yaml: line 13: did not find expected node content"}},
	}
	for _, st := range steps {
		writeFile(t, dir, "vs.yaml", st.content)
		s := loadStep(t, l)
		if got := errorTexts(s); strings.Join(got, "\n") != strings.Join(st.want, "\n") {
			t.Errorf("%s: errors\n got: %q\nwant: %q", st.name, got, st.want)
		}
		vs := find(s, model.KindVirtualService, "reviews")
		if vs == nil || vs.Spec != goodVS.Spec || vs.ResourceVersion != goodVS.ResourceVersion {
			t.Errorf("%s: the VirtualService is not its last good version: %v", st.name, vs)
		}
		if find(s, model.KindDestinationRule, "reviews") == nil {
			t.Errorf("%s: the DestinationRule is gone", st.name)
		}
	}

	// The file reads cleanly without the VirtualService: now it leaves.
	writeFile(t, dir, "vs.yaml", reviewsDR)
	s := loadStep(t, l)
	requireNoErrors(t, s)
	if find(s, model.KindVirtualService, "reviews") != nil || find(s, model.KindDestinationRule, "reviews") == nil {
		t.Errorf("configs = %v, want only the DestinationRule", s.Configs)
	}
	// An empty file that defined nothing is no error.
	writeFile(t, dir, "new.yaml", "")
	requireNoErrors(t, loadStep(t, l))
}

// TestBadFileKeepsItsOtherObjects: a document in error keeps every object
// its file served, also those of documents that are gone from the file.
func TestBadFileKeepsItsOtherObjects(t *testing.T) {
	dir := t.TempDir()
	l := newTestLoader(dir, testLogger(t))
	writeFile(t, dir, "all.yaml", reviewsDR+"---\n"+reviewsVS)
	requireNoErrors(t, loadStep(t, l))

	// The VirtualService is gone from the file, and a bad document came first.
	writeFile(t, dir, "all.yaml", "{{{\n---\n"+reviewsDR)
	s := loadStep(t, l)
	if len(s.Errors) != 1 || find(s, model.KindVirtualService, "reviews") == nil {
		t.Errorf("errors = %v, configs = %v; want one error and the VirtualService kept", errorTexts(s), s.Configs)
	}
	if dr := find(s, model.KindDestinationRule, "reviews"); dr == nil || dr.Source != "all.yaml#1" {
		t.Errorf("DestinationRule = %v, want the one of all.yaml#1", dr)
	}
	// Fixed: the file reads cleanly without the VirtualService.
	writeFile(t, dir, "all.yaml", reviewsDR+"---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: other}\nspec: {host: other}\n")
	s = loadStep(t, l)
	requireNoErrors(t, s)
	if find(s, model.KindVirtualService, "reviews") != nil || find(s, model.KindDestinationRule, "other") == nil {
		t.Errorf("configs = %v, want the two DestinationRules only", s.Configs)
	}
}

// TestWatcherNonAtomicWrite is the reported sequence through the watcher,
// as a shell does ": > vs.yaml; cat bad.yaml > vs.yaml": no snapshot along
// the way lacks the VirtualService.
func TestWatcherNonAtomicWrite(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "vs.yaml", reviewsVS)
	snaps := startWatcher(t, dir, 0)
	waitFor(t, snaps, "initial snapshot", func(s *Snapshot) bool {
		return find(s, model.KindVirtualService, "reviews") != nil
	})
	served := func(s *Snapshot) bool {
		c := find(s, model.KindVirtualService, "reviews")
		if c == nil || firstWeight(c) != 80 {
			t.Errorf("a snapshot lost the VirtualService: %v, errors %v", s.Configs, errorTexts(s))
		}
		return true
	}
	if err := os.Truncate(filepath.Join(dir, "vs.yaml"), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, snaps, "the empty file reported", func(s *Snapshot) bool {
		return served(s) && len(s.Errors) == 1 && strings.Contains(s.Errors[0].Error(), "file is empty")
	})
	writeFile(t, dir, "vs.yaml", withWeights(130, -30))
	waitFor(t, snaps, "the bad version reported", func(s *Snapshot) bool {
		return served(s) && len(s.Errors) > 0 && strings.Contains(s.Errors[0].Error(), "must be between 0 and 100")
	})
}
