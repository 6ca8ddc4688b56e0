package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/preview"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestPreviewCommand runs pilot-discovery preview against a real server
// over Bookinfo with the reviews 80/20 VirtualService and one connected
// sidecar: the text output lists the weight changes of RDS 9080, -o json
// is the endpoint's Result, and an invalid change prints its error and
// fails the command.
func TestPreviewCommand(t *testing.T) {
	dir := t.TempDir()
	for _, rel := range []string{"bookinfo-kube/bookinfo.yaml", "bookinfo-networking/destination-rule-all.yaml", "bookinfo-networking/virtual-service-reviews-80-20.yaml"} {
		data, err := os.ReadFile(fixtures.Path(t, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(rel)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.DebugAddr = "127.0.0.1:0"
	srv := bootstraptest.Start(t, opts)
	c := bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "productpage-v1-1", "default", "10.244.0.11", map[string]string{"app": "productpage"})})
	bootstraptest.WaitClient(t, c, "complete", (*adsc.Client).Complete)

	vs, err := os.ReadFile(fixtures.Path(t, "bookinfo-networking/virtual-service-reviews-80-20.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	change := filepath.Join(t.TempDir(), "change.yaml")
	if err := os.WriteFile(change, bytes.ReplaceAll(bytes.ReplaceAll(vs, []byte("weight: 80"), []byte("weight: 50")), []byte("weight: 20"), []byte("weight: 50")), 0o600); err != nil {
		t.Fatal(err)
	}
	server := "http://" + srv.DebugListenAddr()
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		root := newRootCommand(&out, &errOut, func(string) string { return "" })
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}

	out, err := run("preview", "-f", change, "--server", server)
	if err != nil {
		t.Fatalf("preview: %v\n%s", err, out)
	}
	for _, want := range []string{"VirtualService default/reviews: update", "1 of 1 connected proxies would receive a change",
		"  RDS\n    ~ 9080\n", ".route.weighted_clusters.clusters[0].weight: 80 → 50", ".route.weighted_clusters.clusters[1].weight: 20 → 50"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	t.Logf("text output:\n%s", out)
	out, err = run("preview", "-f", change, "--server", server, "-o", "json", "--timeout", (30 * time.Second).String())
	var res preview.Result
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || len(res.Proxies) != 1 || res.Proxies[0].Types[0].Type != "RDS" {
		t.Fatalf("-o json: %v\n%s", err, out)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, bytes.Replace(vs, []byte("weight: 80"), []byte("weight: 180"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = run("preview", "-f", bad, "--server", server)
	t.Logf("invalid output:\n%s", out)
	if !errors.Is(err, errInvalidChange) || !strings.Contains(out, "VirtualService default/reviews") || !strings.Contains(out, "spec.http[0].route[0].weight") {
		t.Fatalf("invalid change: %v\n%s", err, out)
	}
	if _, err := run("preview", "--server", server); err == nil || !strings.Contains(err.Error(), "nothing to preview") {
		t.Fatalf("no change given: %v", err)
	}
}
