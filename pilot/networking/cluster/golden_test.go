package cluster_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

var update = flag.Bool("update", false, "rewrite testdata/out golden files")

// TestGolden builds the productpage-v1 sidecar's outbound clusters for each
// testdata/NAME.yaml and Istio's Bookinfo destination rules (Bookinfo with
// those DestinationRules) and compares them with
// testdata/out/NAME.clusters.yaml. go test -update rewrites them.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata inputs: %v", err)
	}
	for i, in := range inputs {
		if inputs[i], err = filepath.Abs(in); err != nil {
			t.Fatal(err)
		}
	}
	inputs = append(inputs, "bookinfo-networking/destination-rule-all.yaml",
		"bookinfo-networking/destination-rule-all-mtls.yaml", "bookinfo-networking/destination-rule-reviews.yaml")
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			clusters, err := cluster.Build(nt.BookinfoProxy("productpage-v1"), bookinfoWith(t, in).PushContext())
			if err != nil {
				t.Fatal(err)
			}
			var docs [][]byte
			for _, c := range clusters {
				if !strings.HasPrefix(c.Name, cluster.Outbound+"|") {
					continue
				}
				nt.ValidateRecursively(t, c)
				js, err := protojson.Marshal(c)
				if err != nil {
					t.Fatal(err)
				}
				var compact bytes.Buffer
				if err := json.Compact(&compact, js); err != nil {
					t.Fatal(err)
				}
				y, err := yaml.JSONToYAML(compact.Bytes())
				if err != nil {
					t.Fatal(err)
				}
				docs = append(docs, y)
			}
			got := bytes.Join(docs, []byte("---\n"))
			out := filepath.Join("testdata", "out", name+".clusters.yaml")
			if *update {
				if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(out, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%v (run go test ./pilot/networking/cluster -run TestGolden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the generated clusters; review and rerun with -update.\ngot:\n%s", out, got)
			}
		})
	}
}
