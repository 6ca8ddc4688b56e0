package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// startBookinfo serves the bundled example plus more of Bookinfo's
// networking fixtures (header match, fault injection) from a temp dir.
func startBookinfo(t *testing.T) (*bootstrap.Server, *file.Snapshot) {
	t.Helper()
	dir := t.TempDir()
	root := fixtures.RepoRoot(t)
	copyDir(t, filepath.Join(root, "examples", "bookinfo"), dir)
	for _, f := range []string{"virtual-service-ratings-test-delay.yaml", "virtual-service-details-v2.yaml", "egress-rule-google-apis.yaml", "bookinfo-gateway.yaml"} {
		copyFile(t, fixtures.Path(t, "bookinfo-networking/"+f), filepath.Join(dir, f))
	}
	snap, err := file.NewLoader(dir, slog.New(slog.NewTextHandler(io.Discard, nil))).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Errors) > 0 {
		t.Fatalf("bookinfo fixtures have errors: %v", snap.Errors)
	}
	srv := startServer(t, dir)
	return srv, snap
}

func startServer(t *testing.T, dir string) *bootstrap.Server {
	t.Helper()
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	return bootstraptest.Start(t, opts)
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			copyFile(t, filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// runClient runs an Envoy-like client until the test ends and waits for it
// to hold CDS, LDS and every EDS and RDS resource those name.
func runClient(t *testing.T, conn *grpc.ClientConn, cfg adsc.Config) *adsc.Client {
	t.Helper()
	c := adsc.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ADS client: %v", err)
		}
	})
	wait, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	if err := c.WaitFor(wait, complete); err != nil {
		t.Fatalf("client never got a complete config: %v (stats %+v)", err, c.Stats())
	}
	return c
}

// complete: CDS and LDS arrived, and every EDS cluster and RDS name they
// reference has been received.
func complete(c *adsc.Client) bool {
	if !c.HasAll() {
		return false
	}
	eds := c.Resources(model.EndpointType)
	for name, a := range c.Resources(model.ClusterType) {
		cl := &clusterv3.Cluster{}
		if a.UnmarshalTo(cl) == nil && cl.GetType() == clusterv3.Cluster_EDS {
			if _, ok := eds[name]; !ok {
				return false
			}
		}
	}
	return true
}

func TestBookinfoResourcesValidate(t *testing.T) {
	srv, snap := startBookinfo(t)
	conn := bootstraptest.Dial(t, srv.GRPCListenAddr())
	pods := map[string]bool{"productpage-v1": true, "reviews-v1": true, "ratings-v1": true}
	found := 0
	for _, pod := range snap.Kube.Pods {
		if !pods[pod.Name] {
			continue
		}
		found++
		for _, delta := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/delta=%v", pod.Name, delta), func(t *testing.T) {
				node := bootstraptest.SidecarNode(t, pod.Name, pod.Namespace, pod.Status.PodIP, pod.Labels)
				c := runClient(t, conn, adsc.Config{Node: node, Delta: delta})
				total := 0
				for _, typ := range []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType} {
					res, err := c.Decoded(typ)
					if err != nil {
						t.Fatal(err)
					}
					if len(res) == 0 {
						t.Errorf("no %s resources", model.ShortType(typ))
					}
					for name, m := range res {
						if err := networkingtest.Validate(m); err != nil {
							t.Errorf("%s %s: %v", model.ShortType(typ), name, err)
						}
						total++
					}
				}
				checkBookinfoFacts(t, pod.Name, c)
				t.Logf("%d resources valid", total)
			})
		}
	}
	if found != len(pods) {
		t.Fatalf("found %d of the Bookinfo pods %v in examples/bookinfo", found, pods)
	}
}

// checkBookinfoFacts asserts what the Bookinfo configs mean, not just counts.
func checkBookinfoFacts(t *testing.T, pod string, c *adsc.Client) {
	t.Helper()
	clusters := c.Resources(model.ClusterType)
	for _, want := range []string{
		"outbound|9080||reviews.default.svc.cluster.local", "outbound|9080|v1|reviews.default.svc.cluster.local",
		"outbound|9080|v3|reviews.default.svc.cluster.local", "BlackHoleCluster", "PassthroughCluster",
	} {
		if _, ok := clusters[want]; !ok {
			t.Errorf("missing cluster %s", want)
		}
	}
	if _, ok := clusters["inbound|9080||"]; !ok {
		t.Errorf("%s: missing its inbound cluster inbound|9080||", pod)
	}
	routes, err := c.Decoded(model.RouteType)
	if err != nil {
		t.Fatal(err)
	}
	rc, ok := routes["9080"].(*routev3.RouteConfiguration)
	if !ok {
		t.Fatalf("no route config 9080: %v", keys(routes))
	}
	var reviews *routev3.VirtualHost
	for _, vh := range rc.GetVirtualHosts() {
		if vh.GetName() == "reviews.default.svc.cluster.local:9080" {
			reviews = vh
		}
	}
	if reviews == nil {
		t.Fatal("no reviews virtual host in route 9080")
	}
	wc := reviews.GetRoutes()[0].GetRoute().GetWeightedClusters()
	got := map[string]uint32{}
	for _, cw := range wc.GetClusters() {
		got[cw.GetName()] = cw.GetWeight().GetValue()
	}
	if got["outbound|9080|v1|reviews.default.svc.cluster.local"] != 80 || got["outbound|9080|v2|reviews.default.svc.cluster.local"] != 20 {
		t.Errorf("reviews split = %v, want v1 80 / v2 20", got)
	}
	eps, err := c.Decoded(model.EndpointType)
	if err != nil {
		t.Fatal(err)
	}
	if n := countEndpoints(eps["outbound|9080||reviews.default.svc.cluster.local"]); n != 3 {
		t.Errorf("reviews has %d endpoints, want 3", n)
	}
	if n := countEndpoints(eps["outbound|9080|v2|reviews.default.svc.cluster.local"]); n != 1 {
		t.Errorf("reviews subset v2 has %d endpoints, want 1", n)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func countEndpoints(m proto.Message) int {
	cla, ok := m.(*endpointv3.ClusterLoadAssignment)
	if !ok {
		return -1
	}
	n := 0
	for _, l := range cla.GetEndpoints() {
		n += len(l.GetLbEndpoints())
	}
	return n
}
