package authz_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/networking/authz"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

var update = flag.Bool("update", false, "rewrite testdata/out from the generated filters")

// loadPush reads one Istio YAML file through the file config source and
// builds a PushContext of its objects.
func loadPush(t *testing.T, path string) *model.PushContext {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.yaml"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := file.NewLoader(dir, nil).Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Errors {
		t.Fatalf("%s: %v", path, e)
	}
	return nt.Input{Configs: snap.Configs}.PushContext()
}

// goldenDoc is what a golden file holds: the filters in order and the warnings.
type goldenDoc struct {
	HTTP            []json.RawMessage `json:"http"`
	Network         []json.RawMessage `json:"network"`
	Warnings        []string          `json:"warnings"`
	NetworkWarnings []string          `json:"networkWarnings"`
}

func toJSON(t *testing.T, m proto.Message) json.RawMessage {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGolden builds the filters of the productpage workload from each
// testdata/in file and compares them with testdata/out/NAME.rbac.yaml.
func TestGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/in/*.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	want := map[string]bool{}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		out := filepath.Join("testdata", "out", name+".rbac.yaml")
		want[out] = true
		t.Run(name, func(t *testing.T) {
			f, err := authz.ForWorkload(loadPush(t, in), "default", map[string]string{"app": "productpage", "version": "v1"})
			if err != nil {
				t.Fatal(err)
			}
			doc := goldenDoc{Warnings: f.Warnings, NetworkWarnings: f.NetworkWarnings}
			for _, h := range f.HTTP {
				nt.ValidateRecursively(t, h)
				doc.HTTP = append(doc.HTTP, toJSON(t, h))
			}
			for _, n := range f.Network {
				nt.ValidateRecursively(t, n)
				doc.Network = append(doc.Network, toJSON(t, n))
			}
			js, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := yaml.JSONToYAML(js)
			if err != nil {
				t.Fatal(err)
			}
			nt.GoldenBytes(t, *update, out, got)
		})
	}
	nt.RemoveStaleGoldens(t, *update, filepath.Join("testdata", "out", "*.rbac.yaml"), want)
}
