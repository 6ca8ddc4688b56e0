package validation

import (
	"context"
	"testing"

	"github.com/meshpilot/meshpilot/internal/fixtures"
)

// onePerKind returns the first valid fixture of each kind, from
// testdata/rules-valid.yaml and Istio's valid fixtures.
func onePerKind(b *testing.B) []fixture {
	b.Helper()
	seen := map[string]bool{}
	var out []fixture
	all := append(loadFixtures(b, "testdata", "rules-valid.yaml"), loadFixtures(b, fixtures.Shared(b, "istio-validation"), "-valid.yaml")...)
	for _, f := range all {
		if kind := f.kind(); !seen[kind] {
			seen[kind] = true
			out = append(out, f)
		}
	}
	return out
}

// BenchmarkValidate validates one document per kind with a warm Validator
// (CRD compiled): the cost per document of a config load.
func BenchmarkValidate(b *testing.B) {
	v := New(Options{})
	for _, f := range onePerKind(b) {
		if errs, err := v.Validate(context.Background(), f.json); err != nil || len(errs) > 0 {
			b.Fatalf("%s: %v %v", f.ref(), err, errs)
		}
		b.Run(f.kind(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Validate(context.Background(), f.json); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFirstUse validates one document per kind with a new Validator:
// finding, parsing and compiling the kind's CRD (schema and CEL rules),
// paid once per kind and process.
func BenchmarkFirstUse(b *testing.B) {
	for _, f := range onePerKind(b) {
		b.Run(f.kind(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(Options{}).Validate(context.Background(), f.json); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
