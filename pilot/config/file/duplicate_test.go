package file

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshpilot/meshpilot/model"
)

// loadStep loads through l and returns the snapshot, failing on a
// directory error.
func loadStep(t *testing.T, l *Loader) *Snapshot {
	t.Helper()
	s, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// servedReviews returns the Source and first weight of the served reviews
// VirtualService, and the errors' text.
func servedReviews(t *testing.T, s *Snapshot) (string, int32, []string) {
	t.Helper()
	var errs []string
	for _, e := range s.Errors {
		errs = append(errs, e.Error())
	}
	c := find(s, model.KindVirtualService, "reviews")
	if c == nil {
		t.Fatalf("reviews is not served; errors: %v", errs)
	}
	return c.Source, firstWeight(c), errs
}

// TestDuplicateKeepsServedObject: a newcomer defining an object already
// served does not take it over, whatever the file names, and the error
// names the newcomer and the file it conflicts with.
func TestDuplicateKeepsServedObject(t *testing.T) {
	dir := t.TempDir()
	l := newTestLoader(dir, testLogger(t))
	writeFile(t, dir, "b.yaml", reviewsVS)
	if src, w, errs := servedReviews(t, loadStep(t, l)); src != "b.yaml#0" || w != 80 || len(errs) != 0 {
		t.Fatalf("first load: %s weight %d, errors %v", src, w, errs)
	}

	// a.yaml sorts first but comes second.
	writeFile(t, dir, "a.yaml", withWeights(10, 90))
	wantErr := "a.yaml#0 VirtualService default/reviews: duplicate VirtualService default/reviews: already defined in b.yaml#0"
	for i := range 2 {
		src, w, errs := servedReviews(t, loadStep(t, l))
		if src != "b.yaml#0" || w != 80 || len(errs) != 1 || errs[0] != wantErr {
			t.Errorf("load %d with the newcomer: served %s weight %d, errors %v; want b.yaml#0, 80, [%s]", i, src, w, errs, wantErr)
		}
	}

	// The served file changes its object: it keeps it.
	writeFile(t, dir, "b.yaml", withWeights(70, 30))
	if src, w, errs := servedReviews(t, loadStep(t, l)); src != "b.yaml#0" || w != 70 || len(errs) != 1 || errs[0] != wantErr {
		t.Errorf("after editing b.yaml: served %s weight %d, errors %v", src, w, errs)
	}

	// The served file turns bad: its last good version stays served.
	writeFile(t, dir, "b.yaml", withWeights(170, -70))
	src, w, errs := servedReviews(t, loadStep(t, l))
	if src != "b.yaml#0" || w != 70 || len(errs) != 3 {
		t.Errorf("with b.yaml bad: served %s weight %d, errors %v; want b.yaml's last good and 3 errors", src, w, errs)
	}

	// Once the served file is gone, the other takes over, with no error...
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	if src, w, errs := servedReviews(t, loadStep(t, l)); src != "a.yaml#0" || w != 10 || len(errs) != 0 {
		t.Errorf("after removing b.yaml: served %s weight %d, errors %v", src, w, errs)
	}
	// ...and keeps it when b.yaml comes back.
	writeFile(t, dir, "b.yaml", reviewsVS)
	wantErr = "b.yaml#0 VirtualService default/reviews: duplicate VirtualService default/reviews: already defined in a.yaml#0"
	if src, w, errs := servedReviews(t, loadStep(t, l)); src != "a.yaml#0" || w != 10 || len(errs) != 1 || errs[0] != wantErr {
		t.Errorf("after b.yaml came back: served %s weight %d, errors %v; want a.yaml#0, 10, [%s]", src, w, errs, wantErr)
	}
}

// TestDuplicateAtFirstLoad: with nothing served yet, the file whose path
// sorts first wins, then the earlier document in a file; the rule does not
// depend on the order the documents were written in.
func TestDuplicateAtFirstLoad(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "z.yaml", withWeights(10, 90))
	writeFile(t, dir, "m/a.yaml", withWeights(20, 80)+"---\n"+withWeights(30, 70))
	src, w, errs := servedReviews(t, mustLoad(t, dir))
	want := []string{
		"m/a.yaml#1 VirtualService default/reviews: duplicate VirtualService default/reviews: already defined in m/a.yaml#0",
		"z.yaml#0 VirtualService default/reviews: duplicate VirtualService default/reviews: already defined in m/a.yaml#0",
	}
	if src != "m/a.yaml#0" || w != 20 || len(errs) != 2 || errs[0] != want[0] || errs[1] != want[1] {
		t.Errorf("served %s weight %d, errors %v; want m/a.yaml#0, 20, %v", src, w, errs, want)
	}
}
