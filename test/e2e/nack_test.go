package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// A proxy that rejects a listener update keeps its stream and the config it
// had; the reject metrics move; the next change is delivered and accepted.
func TestNACKKeepsStreamAndLastGoodConfig(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo"), dir)
			srv := startServer(t, dir)
			var reject atomic.Bool
			cfg := adsc.Config{
				Node:  bootstraptest.SidecarNode(t, "productpage-v1", "default", "10.244.0.99", map[string]string{"app": "productpage"}),
				Delta: delta,
				NACK: func(typeURL string, _ map[string]*anypb.Any) error {
					if typeURL == model.RouteType && reject.Load() {
						return errors.New("test proxy rejects this route config")
					}
					return nil
				},
			}
			c := runClient(t, bootstraptest.Dial(t, srv.GRPCListenAddr()), cfg)
			if w := reviewsWeights(c); w[reviewsV1] != 80 {
				t.Fatalf("initial split %v", w)
			}
			before, _ := bootstraptest.Metric(t, srv, "pilot_xds_rds_reject")

			reject.Store(true)
			vsFile := filepath.Join(dir, "virtual-service-reviews-80-20.yaml")
			good, err := os.ReadFile(vsFile)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, vsFile, strings.Replace(strings.Replace(string(good), "weight: 80", "weight: 70", 1), "weight: 20", "weight: 30", 1))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := c.WaitFor(ctx, func(c *adsc.Client) bool { return c.Stats().NACKs[model.RouteType] > 0 }); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 20*time.Second, "pilot_xds_rds_reject to move", func() bool {
				v, _ := bootstraptest.Metric(t, srv, "pilot_xds_rds_reject")
				return v > before
			})
			if total, ok := bootstraptest.Metric(t, srv, `pilot_total_xds_rejects{type="rds"}`); !ok || total == 0 {
				t.Errorf("pilot_total_xds_rejects{type=\"rds\"} = %v (present %v), want > 0", total, ok)
			}
			if w := reviewsWeights(c); w[reviewsV1] != 80 {
				t.Fatalf("client state changed by a rejected update: %v", w)
			}

			// The stream is alive: the next change arrives and is accepted.
			reject.Store(false)
			writeFile(t, vsFile, strings.Replace(strings.Replace(string(good), "weight: 80", "weight: 60", 1), "weight: 20", "weight: 40", 1))
			if err := c.WaitFor(ctx, func(c *adsc.Client) bool { return reviewsWeights(c)[reviewsV1] == 60 }); err != nil {
				t.Fatalf("update after a NACK never arrived: %v (now %v)", err, reviewsWeights(c))
			}
		})
	}
}
