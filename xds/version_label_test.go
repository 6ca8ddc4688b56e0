package xds

import (
	"fmt"
	"strings"
	"testing"
)

// A client cannot grow pilot_xds's label set: implausible versions are
// "invalid", and past maxVersionLabels distinct ones, "other"; a version
// already labelled keeps its label.
func TestVersionLabelsBounded(t *testing.T) {
	var v versionLabels
	for _, c := range []struct{ in, want string }{
		{"", "unknown"}, {"1.31.1", "1.31.1"}, {"1.25-alpha.7ab3+build_2", "1.25-alpha.7ab3+build_2"},
		{"1.0\n", "invalid"}, {strings.Repeat("1", maxVersionLen+1), "invalid"}, {`1.0"}`, "invalid"},
	} {
		if got := v.label(c.in); got != c.want {
			t.Errorf("label(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for i := range 2 * maxVersionLabels {
		v.label(fmt.Sprintf("9.%d", i))
	}
	if got := v.label("9.9999"); got != "other" {
		t.Errorf("a new version past the limit got %q, want other", got)
	}
	if got := v.label("1.31.1"); got != "1.31.1" {
		t.Errorf("a labelled version got %q", got)
	}
	if n := len(v.seen); n != maxVersionLabels {
		t.Errorf("%d labels kept, want %d", n, maxVersionLabels)
	}
}
