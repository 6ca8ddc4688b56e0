package validation

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
)

// fixture is one document of a fixture file.
type fixture struct {
	file  string
	index int
	name  string
	// wantErr is the _err value; empty for a valid object.
	wantErr string
	// json is the object without _err.
	json []byte
}

// loadFixtures reads every document of the *-valid.yaml or *-invalid.yaml
// files of the shared istio-validation fixtures: Istio's own valid and
// invalid objects, each invalid one preceded by "_err:" with the message the
// API server gives.
func loadFixtures(t testing.TB, suffix string) []fixture {
	t.Helper()
	fixtureDir := fixtures.Shared(t, "istio-validation")
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*"+suffix))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures %s in %s: %v", suffix, fixtureDir, err)
	}
	var out []fixture
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s#%d: %v", f, i, err)
			}
			j, err := yaml.YAMLToJSON(doc)
			if err != nil {
				t.Fatalf("%s#%d: %v", f, i, err)
			}
			var obj map[string]any
			if err := json.Unmarshal(j, &obj); err != nil {
				t.Fatalf("%s#%d: %v", f, i, err)
			}
			if obj == nil {
				continue // only comments
			}
			wantErr, _ := obj["_err"].(string)
			delete(obj, "_err")
			clean, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			name, _ := obj["metadata"].(map[string]any)["name"].(string)
			out = append(out, fixture{file: filepath.Base(f), index: i, name: name, wantErr: wantErr, json: clean})
		}
	}
	return out
}

// apiGaps are fixture documents that use a field istio.io/api v1.31.1 (our
// CRDs and spec types) does not have yet: a cluster with these CRDs refuses
// them as unknown fields, and so must we. The test fails once the field
// arrives, to drop the entry.
var apiGaps = map[string]string{
	"reqauth-valid.yaml#0":    `spec.jwtRules[0].presence: unknown field "presence"`,
	"reqauth-invalid.yaml#19": `spec.jwtRules[0].presence: unknown field "presence"`,
}

func (f fixture) ref() string { return f.file + "#" + strconv.Itoa(f.index) }

func joinErrors(errs []FieldError) string {
	s := make([]string, len(errs))
	for i, e := range errs {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func TestIstioInvalidFixturesRefused(t *testing.T) {
	v := New(Options{})
	fixtures := loadFixtures(t, "-invalid.yaml")
	for _, f := range fixtures {
		t.Run(f.ref()+"/"+f.name, func(t *testing.T) {
			if f.wantErr == "" {
				t.Fatal("invalid fixture without _err")
			}
			errs, err := v.Validate(context.Background(), f.json)
			if err != nil {
				t.Fatal(err)
			}
			got := joinErrors(errs)
			if gap, ok := apiGaps[f.ref()]; ok {
				if got != gap {
					t.Errorf("errors %q, want the API gap %q", got, gap)
				}
				return
			}
			if !strings.Contains(got, f.wantErr) {
				t.Errorf("errors %q do not contain %q", got, f.wantErr)
			}
		})
	}
}

func TestIstioValidFixturesAccepted(t *testing.T) {
	v := New(Options{})
	for _, f := range loadFixtures(t, "-valid.yaml") {
		t.Run(f.ref()+"/"+f.name, func(t *testing.T) {
			errs, err := v.Validate(context.Background(), f.json)
			if err != nil {
				t.Fatal(err)
			}
			if gap, ok := apiGaps[f.ref()]; ok {
				if got := joinErrors(errs); got != gap {
					t.Errorf("errors %q, want the API gap %q", got, gap)
				}
				return
			}
			if len(errs) > 0 {
				t.Errorf("refused: %s", joinErrors(errs))
			}
		})
	}
}
