package networkingtest

import (
	"path/filepath"
	"testing"
)

// GoldenInputs lists the inputs of a golden test: the files matching glob
// (relative to the test's directory, made absolute) followed by extra
// (paths under the repository's testdata/, as LoadConfigs takes them). It
// fails the test when glob matches nothing. internal/golden compares the
// outputs.
func GoldenInputs(t testing.TB, glob string, extra ...string) []string {
	t.Helper()
	inputs, err := filepath.Glob(glob)
	if err != nil || len(inputs) == 0 {
		t.Fatalf("golden: no inputs match %s: %v", glob, err)
	}
	for i, in := range inputs {
		if inputs[i], err = filepath.Abs(in); err != nil {
			t.Fatalf("golden: %v", err)
		}
	}
	return append(inputs, extra...)
}
