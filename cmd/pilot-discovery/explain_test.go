package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/explain"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestExplainEndToEnd runs the server on Bookinfo in file mode
// (examples/bookinfo: reviews split 80/20 between v1 and v2, plus an
// EndpointSlice per Service), connects productpage's sidecar over ADS,
// checks /debug/explain against what the sidecar received, then runs the
// explain command against the server.
func TestExplainEndToEnd(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo")
	for _, f := range []string{"services.yaml", "pods.yaml", "destination-rule-all.yaml", "virtual-service-reviews-80-20.yaml"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, f), b)
	}
	var slices [][]byte
	for _, s := range fixtures.BookinfoSlices(fixtures.BookinfoPods(t)) {
		b, err := yaml.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		slices = append(slices, b)
	}
	writeFile(t, filepath.Join(dir, "endpointslices.yaml"), bytes.Join(slices, []byte("---\n")))

	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.DebugAddr = "127.0.0.1:0"
	srv := bootstraptest.Start(t, opts)
	node := bootstraptest.SidecarNode(t, "productpage-v1", "default", "10.244.0.16", map[string]string{"app": "productpage", "version": "v1"})
	c := bootstraptest.RunClient(t, srv, adsc.Config{Node: node})
	bootstraptest.WaitClient(t, c, "productpage's initial config", (*adsc.Client).Complete)
	base := "http://" + srv.DebugListenAddr()

	// The route configuration: reviews split 80/20, as the sidecar got it.
	var rds explain.Explanation
	getJSON(t, base, node.GetId(), "rds", "9080", &rds)
	var reviews *explain.VirtualHost
	for i := range rds.Routes.VirtualHosts {
		if rds.Routes.VirtualHosts[i].Name == "reviews.default.svc.cluster.local:9080" {
			reviews = &rds.Routes.VirtualHosts[i]
		}
	}
	if reviews == nil || reviews.VirtualService == nil {
		t.Fatalf("reviews virtual host without its VirtualService: %+v", rds.Routes)
	}
	if got := reviews.VirtualService.Source; got != "virtual-service-reviews-80-20.yaml#0" {
		t.Errorf("VirtualService source = %q", got)
	}
	dests := reviews.Routes[0].Destinations
	want := []explain.Destination{
		{Host: "reviews", Subset: "v1", Weight: 80, Cluster: "outbound|9080|v1|reviews.default.svc.cluster.local"},
		{Host: "reviews", Subset: "v2", Weight: 20, Cluster: "outbound|9080|v2|reviews.default.svc.cluster.local"},
	}
	if len(dests) != len(want) || dests[0] != want[0] || dests[1] != want[1] {
		t.Fatalf("destinations = %+v, want %+v", dests, want)
	}
	for _, d := range dests {
		if _, ok := c.Resources(model.ClusterType)[d.Cluster]; !ok {
			t.Errorf("explained destination %s is not a cluster the sidecar has", d.Cluster)
		}
	}

	// The endpoints of v2: the pod and slice behind the address the sidecar got.
	var eds explain.Explanation
	getJSON(t, base, node.GetId(), "eds", want[1].Cluster, &eds)
	got := c.HealthyEndpoints(want[1].Cluster)
	if len(eds.Endpoints.Endpoints) != 1 || len(got) != 1 {
		t.Fatalf("endpoints: explained %+v, sidecar has %v", eds.Endpoints.Endpoints, got)
	}
	e := eds.Endpoints.Endpoints[0]
	if e.Pod != "reviews-v2" || e.EndpointSlice != "reviews-abcde" || !strings.HasPrefix(got[0], e.Address+":") {
		t.Errorf("endpoint %+v, sidecar has %v", e, got)
	}

	// Errors name what is wrong.
	for _, tc := range []struct {
		query  url.Values
		status int
		says   string
	}{
		{url.Values{"proxyID": {"sidecar~10.9.9.9~nobody.default~default.svc.cluster.local"}, "type": {"rds"}, "name": {"9080"}}, http.StatusNotFound, "no connected proxy"},
		{url.Values{"proxyID": {node.GetId()}, "type": {"rds"}, "name": {"9999"}}, http.StatusNotFound, "is not served"},
		{url.Values{"proxyID": {node.GetId()}, "type": {"sds"}, "name": {"default"}}, http.StatusBadRequest, "want cds, eds, lds, rds"},
		{url.Values{"proxyID": {node.GetId()}, "type": {"cds"}, "name": {"BlackHoleCluster"}}, http.StatusUnprocessableEntity, "BlackHoleCluster"},
		{url.Values{"type": {"cds"}, "name": {"x"}}, http.StatusBadRequest, "proxyID is required"},
	} {
		status, body := testutil.Get(t, base+"/debug/explain?"+tc.query.Encode())
		if status != tc.status || !strings.Contains(body, tc.says) {
			t.Errorf("%v: %d %q, want %d saying %q", tc.query, status, body, tc.status, tc.says)
		}
	}

	// The CLI: a tree, and JSON.
	out := runCLI(t, "explain", "--server", base, "--proxy", node.GetId(), "--type", "rds", "--name", "9080")
	for _, line := range []string{
		"virtual service: default/reviews",
		"from default/reviews http[0]",
		"weight 80 -> outbound|9080|v1|reviews.default.svc.cluster.local",
		"weight 20 -> outbound|9080|v2|reviews.default.svc.cluster.local",
		"VirtualService default/reviews (generation 1, resourceVersion ",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("tree lacks %q:\n%s", line, out)
		}
	}
	var fromCLI explain.Explanation
	if err := json.Unmarshal([]byte(runCLI(t, "explain", "--server", base, "--proxy", node.GetId(), "--type", "eds", "--name", want[1].Cluster, "-o", "json")), &fromCLI); err != nil {
		t.Fatal(err)
	}
	if fromCLI.Endpoints == nil || fromCLI.Endpoints.Endpoints[0].Pod != "reviews-v2" {
		t.Errorf("-o json: %+v", fromCLI.Endpoints)
	}
	root := newRootCommand(io.Discard, io.Discard, func(string) string { return "" })
	root.SetArgs([]string{"explain", "--server", base, "--proxy", "nobody", "--type", "rds", "--name", "9080"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "no connected proxy") || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("unknown proxy: %v", err)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func getJSON(t *testing.T, base, proxy, typ, name string, into *explain.Explanation) {
	t.Helper()
	q := url.Values{"proxyID": {proxy}, "type": {typ}, "name": {name}}
	status, body := testutil.Get(t, base+"/debug/explain?"+q.Encode())
	if status != http.StatusOK {
		t.Fatalf("explain %s %s: %d %s", typ, name, status, body)
	}
	if err := json.Unmarshal([]byte(body), into); err != nil {
		t.Fatal(err)
	}
}

func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	root := newRootCommand(&out, io.Discard, func(string) string { return "" })
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		t.Fatalf("pilot-discovery %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}
