package cluster_test

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/internal/golden"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

var update = flag.Bool("update", false, "rewrite testdata/out golden files and delete stale ones (make golden)")

// TestGolden builds the productpage-v1 sidecar's outbound clusters for each
// testdata/NAME.yaml and Istio's Bookinfo destination rules (Bookinfo with
// those DestinationRules) and compares them with
// testdata/out/NAME.clusters.yaml. make golden (go test -update) rewrites
// them and deletes stale ones.
func TestGolden(t *testing.T) {
	inputs := nt.GoldenInputs(t, "testdata/*.yaml", "bookinfo-networking/destination-rule-all.yaml",
		"bookinfo-networking/destination-rule-all-mtls.yaml", "bookinfo-networking/destination-rule-reviews.yaml")
	out := golden.New(t, filepath.Join("testdata", "out"), *update)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			clusters, err := cluster.Build(nt.BookinfoProxy("productpage-v1"), bookinfoWith(t, in).PushContext())
			if err != nil {
				t.Fatal(err)
			}
			var outbound []proto.Message
			for _, c := range clusters {
				if !strings.HasPrefix(c.Name, clustername.Outbound+"|") {
					continue
				}
				nt.ValidateRecursively(t, c)
				outbound = append(outbound, c)
			}
			out.Messages(t, name+".clusters.yaml", outbound...)
		})
	}
}
