package explain_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/golden"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/explain"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/serviceregistry/kube"
)

var update = flag.Bool("update", false, "rewrite testdata/out golden files and delete stale ones (make golden)")

// goldenCase explains one resource of one Bookinfo proxy with the
// Bookinfo Services, pods and EndpointSlices and the given config files
// ("bookinfo-networking/..." from the repository's testdata, "in/..."
// from this package's).
type goldenCase struct {
	name     string
	configs  []string
	workload string
	typ      string
	resource string
}

var goldenCases = []goldenCase{
	{"rds-no-virtualservice", nil, "productpage-v1", "rds", "9080"},
	{"rds-weighted-80-20", []string{"bookinfo-networking/destination-rule-all.yaml", "bookinfo-networking/virtual-service-reviews-80-20.yaml"}, "productpage-v1", "rds", "9080"},
	{"rds-weighted-50-v3", []string{"bookinfo-networking/destination-rule-all.yaml", "bookinfo-networking/virtual-service-reviews-50-v3.yaml"}, "productpage-v1", "rds", "9080"},
	{"rds-jason-v2-v3", []string{"bookinfo-networking/destination-rule-all.yaml", "bookinfo-networking/virtual-service-reviews-jason-v2-v3.yaml"}, "productpage-v1", "rds", "9080"},
	{"rds-delegate", []string{"bookinfo-networking/destination-rule-all.yaml", "in/delegate.yaml"}, "productpage-v1", "rds", "9080"},
	{"rds-sidecar-scope", []string{"bookinfo-networking/virtual-service-reviews-80-20.yaml", "bookinfo-networking/destination-rule-all.yaml", "in/sidecar.yaml"}, "productpage-v1", "rds", "9080"},
	{"cds-subset-dr-tls", []string{"bookinfo-networking/destination-rule-all-mtls.yaml"}, "productpage-v1", "cds", "outbound|9080|v2|reviews.default.svc.cluster.local"},
	{"cds-subset-auto-mtls", []string{"bookinfo-networking/destination-rule-all.yaml", "in/security.yaml"}, "productpage-v1", "cds", "outbound|9080|v3|reviews.default.svc.cluster.local"},
	{"cds-port-level", []string{"in/portlevel.yaml"}, "productpage-v1", "cds", "outbound|9080|v2|reviews.default.svc.cluster.local"},
	{"cds-merged-dr-v3", []string{"in/merged-dr.yaml"}, "productpage-v1", "cds", "outbound|9080|v3|reviews.default.svc.cluster.local"},
	{"cds-merged-dr-v2", []string{"in/merged-dr.yaml"}, "productpage-v1", "cds", "outbound|9080|v2|reviews.default.svc.cluster.local"},
	{"eds-merged-dr-v3", []string{"in/merged-dr.yaml"}, "productpage-v1", "eds", "outbound|9080|v3|reviews.default.svc.cluster.local"},
	{"cds-no-dr-sidecar", []string{"in/sidecar.yaml"}, "productpage-v1", "cds", "outbound|9080||reviews.default.svc.cluster.local"},
	{"cds-inbound", nil, "reviews-v1", "cds", "inbound|9080||"},
	{"eds-subset", []string{"bookinfo-networking/destination-rule-all.yaml"}, "productpage-v1", "eds", "outbound|9080|v1|reviews.default.svc.cluster.local"},
	{"eds-service", nil, "productpage-v1", "eds", "outbound|9080||reviews.default.svc.cluster.local"},
	{"lds-inbound", []string{"in/security.yaml"}, "reviews-v1", "lds", "virtualInbound"},
	{"lds-inbound-envoyfilter", []string{"in/envoyfilter.yaml"}, "reviews-v1", "lds", "virtualInbound"},
	{"lds-outbound-envoyfilter", []string{"in/envoyfilter.yaml"}, "productpage-v1", "lds", "virtualOutbound"},
	{"cds-envoyfilter", []string{"in/envoyfilter.yaml"}, "productpage-v1", "cds", "outbound|9080||reviews.default.svc.cluster.local"},
}

// TestGolden checks each case's tree (NAME.txt) and JSON (NAME.json)
// against testdata/out.
func TestGolden(t *testing.T) {
	set := golden.New(t, filepath.Join("testdata", "out"), *update)
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			push, proxy := bookinfo(t, tc.configs, tc.workload)
			e, err := explain.Explain(proxy, push, tc.typ, tc.resource)
			if err != nil {
				t.Fatal(err)
			}
			e.PushVersion = "" // a timestamp
			var tree bytes.Buffer
			if err := explain.WriteTree(&tree, e); err != nil {
				t.Fatal(err)
			}
			set.Bytes(t, tc.name+".txt", tree.Bytes())
			js, err := json.MarshalIndent(e, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			set.Bytes(t, tc.name+".json", append(js, '\n'))
		})
	}
}

// bookinfo loads, the way file mode does (pilot/config/file and the
// Kubernetes registry), a directory with examples/bookinfo's Services and
// pods, an EndpointSlice per Service and configs, and returns its
// PushContext and the sidecar of workload.
func bookinfo(t *testing.T, configs []string, workload string) (*model.PushContext, *model.Proxy) {
	t.Helper()
	dir := t.TempDir()
	root := fixtures.RepoRoot(t)
	copyFile(t, filepath.Join(root, "examples", "bookinfo", "services.yaml"), filepath.Join(dir, "services.yaml"))
	copyFile(t, filepath.Join(root, "examples", "bookinfo", "pods.yaml"), filepath.Join(dir, "pods.yaml"))
	pods := fixtures.BookinfoPods(t)
	var slices []string
	for _, s := range fixtures.BookinfoSlices(pods) {
		b, err := yaml.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		slices = append(slices, string(b))
	}
	if err := os.WriteFile(filepath.Join(dir, "endpointslices.yaml"), []byte(strings.Join(slices, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range configs {
		src := filepath.Join("testdata", c)
		if rest, ok := strings.CutPrefix(c, "bookinfo-networking/"); ok {
			src = fixtures.Path(t, filepath.Join("bookinfo-networking", rest))
		}
		copyFile(t, src, filepath.Join(dir, filepath.Base(c)))
	}
	snap, err := file.NewLoader(dir, nil).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Errors) > 0 {
		t.Fatalf("config errors: %v", snap.Errors)
	}
	idx := model.NewEndpointIndex()
	reg := kube.NewRegistry(networkingtest.DefaultDomain, idx, slog.New(slog.DiscardHandler))
	reg.Replace(snap.Kube)
	env := &model.Environment{ServiceDiscovery: reg, ConfigStore: networkingtest.NewConfigStore(snap.Configs),
		Endpoints: idx, DomainSuffix: networkingtest.DefaultDomain}
	push := model.NewPushContext(env, nil, nil)
	for _, p := range pods {
		if p.Name == workload {
			return push, networkingtest.Proxy(p.Status.PodIP, p.Name, p.Namespace, p.Labels)
		}
	}
	t.Fatalf("no pod %s", workload)
	return nil, nil
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
