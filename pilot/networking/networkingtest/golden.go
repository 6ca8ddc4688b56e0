package networkingtest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// GoldenInputs lists the files matching glob (relative to the test's
// directory, made absolute) followed by extra (paths under the repository's
// testdata/, as LoadConfigs takes them). It fails the test when glob matches
// nothing.
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

// Golden compares msgs, rendered by GoldenYAML, with the golden file at
// path; with update (each test package's -update flag) it rewrites the file
// instead. See GoldenBytes.
func Golden(t testing.TB, update bool, path string, msgs ...proto.Message) {
	t.Helper()
	GoldenBytes(t, update, path, GoldenYAML(t, msgs...))
}

// GoldenYAML renders each message as protojson converted to YAML, the
// documents separated by "---" lines.
func GoldenYAML(t testing.TB, msgs ...proto.Message) []byte {
	t.Helper()
	docs := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		js, err := protojson.Marshal(m)
		if err != nil {
			t.Fatalf("golden: marshal %T: %v", m, err)
		}
		// protojson varies its whitespace on purpose; compact it so the
		// YAML depends on the message only.
		var compact bytes.Buffer
		if err := json.Compact(&compact, js); err != nil {
			t.Fatalf("golden: compact %T: %v", m, err)
		}
		y, err := yaml.JSONToYAML(compact.Bytes())
		if err != nil {
			t.Fatalf("golden: %T to YAML: %v", m, err)
		}
		docs = append(docs, y)
	}
	return bytes.Join(docs, []byte("---\n"))
}

// GoldenBytes fails the test when got differs from the file at path. With
// update it writes got to path instead (creating its directory), so that
// `go test -update` regenerates the golden files for review.
func GoldenBytes(t testing.TB, update bool, path string, got []byte) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("golden: %v", err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("golden: %v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden: %v (run go test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("golden: %s differs from the generated config; rerun go test with -update and review the diff.\ngot:\n%s", path, got)
	}
}

// RemoveStaleGoldens deletes, when update is set, the files matching glob
// that are not in keep (golden files no input produces any more).
func RemoveStaleGoldens(t testing.TB, update bool, glob string, keep map[string]bool) {
	t.Helper()
	if !update {
		return
	}
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatalf("golden: %v", err)
	}
	for _, f := range files {
		if !keep[f] {
			if err := os.Remove(f); err != nil {
				t.Errorf("golden: remove stale %s: %v", f, err)
			}
		}
	}
}
