package e2e

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// reviewsWeights reads the reviews split from route config 9080.
func reviewsWeights(c *adsc.Client) map[string]uint32 {
	rcs, err := c.Decoded(model.RouteType)
	if err != nil {
		return nil
	}
	rc, _ := rcs["9080"].(*routev3.RouteConfiguration)
	for _, vh := range rc.GetVirtualHosts() {
		if vh.GetName() != "reviews.default.svc.cluster.local:9080" {
			continue
		}
		out := map[string]uint32{}
		r := vh.GetRoutes()[0].GetRoute()
		if single := r.GetCluster(); single != "" {
			out[single] = 100
		}
		for _, cw := range r.GetWeightedClusters().GetClusters() {
			out[cw.GetName()] = cw.GetWeight().GetValue()
		}
		return out
	}
	return nil
}

const (
	reviewsV1 = "outbound|9080|v1|reviews.default.svc.cluster.local"
	reviewsV2 = "outbound|9080|v2|reviews.default.svc.cluster.local"
	reviewsV3 = "outbound|9080|v3|reviews.default.svc.cluster.local"
)

// A bad document is reported with file, index, object and field; the last
// good version keeps being served; a fix is picked up without a restart.
func TestBadDocumentKeepsLastGoodAndReloadRecovers(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo"), dir)
	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.Log = bootstraptest.Logger(t, slog.LevelInfo, logs)
	srv := bootstraptest.Start(t, opts)
	ctx := t.Context()

	for _, delta := range []bool{false, true} {
		c := runClient(t, bootstraptest.Dial(t, srv.GRPCListenAddr()), adsc.Config{Node: bootstraptest.SidecarNode(t, "productpage-v1", "default", "10.244.0.99", map[string]string{"app": "productpage"}), Delta: delta})
		if w := reviewsWeights(c); w[reviewsV1] != 80 || w[reviewsV2] != 20 {
			t.Fatalf("initial split %v", w)
		}

		vsFile := filepath.Join(dir, "virtual-service-reviews-80-20.yaml")
		good, err := os.ReadFile(vsFile)
		if err != nil {
			t.Fatal(err)
		}
		bad := strings.Replace(string(good), "weight: 80", "weight: 180", 1)
		writeFile(t, vsFile, bad)
		testutil.Eventually(t, 20*time.Second, "config error reported in logs and metrics", func() bool {
			errs, ok := bootstraptest.Metric(t, srv, "meshpilot_config_errors")
			return strings.Contains(logs.String(), "spec.http[0].route[0].weight") && ok && errs == 1
		})
		line := lineContaining(logs.String(), "spec.http[0].route[0].weight")
		for _, want := range []string{"virtual-service-reviews-80-20.yaml", "VirtualService", "reviews", "default"} {
			if !strings.Contains(line, want) {
				t.Errorf("error line %q does not name %q", line, want)
			}
		}
		if w := reviewsWeights(c); w[reviewsV1] != 80 || w[reviewsV2] != 20 {
			t.Fatalf("bad document changed what is served: %v", w)
		}

		// The fix: everything to v3, served with no restart.
		writeFile(t, vsFile, strings.NewReplacer("subset: v1", "subset: v3", "weight: 80", "weight: 100", "subset: v2\n      weight: 20", "subset: v2\n      weight: 0").Replace(string(good)))
		wait, stop := context.WithTimeout(ctx, 20*time.Second)
		if err := c.WaitFor(wait, func(c *adsc.Client) bool { return reviewsWeights(c)[reviewsV3] == 100 }); err != nil {
			t.Fatalf("fixed VirtualService never served: %v (now %v)", err, reviewsWeights(c))
		}
		stop()
		if errs, ok := bootstraptest.Metric(t, srv, "meshpilot_config_errors"); !ok || errs != 0 {
			t.Error("config error count not cleared after the fix")
		}
		writeFile(t, vsFile, string(good))
		wait, stop = context.WithTimeout(ctx, 20*time.Second)
		if err := c.WaitFor(wait, func(c *adsc.Client) bool { return reviewsWeights(c)[reviewsV1] == 80 }); err != nil {
			t.Fatalf("restored VirtualService never served: %v", err)
		}
		stop()
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write then rename, as editors and ConfigMap mounts do.
	tmp := path + ".tmp~"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func lineContaining(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
