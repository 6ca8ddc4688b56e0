package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestServedOverADS runs the real discovery server on the bundled Bookinfo
// example plus Istio's bookinfo-gateway.yaml; an ingress gateway (node type
// router) on SotW and on Delta gets listener 0.0.0.0_8080 and route
// http.8080 to productpage, each passing ValidateAll.
func TestServedOverADS(t *testing.T) {
	dir := t.TempDir()
	examples := filepath.Join(nt.TestdataDir(t), "..", "examples", "bookinfo")
	entries, err := os.ReadDir(examples)
	if err != nil {
		t.Fatal(err)
	}
	copyInto := func(from string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(from)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".yaml" {
			copyInto(filepath.Join(examples, e.Name()))
		}
	}
	copyInto(filepath.Join(nt.TestdataDir(t), "bookinfo-networking", "bookinfo-gateway.yaml"))

	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	srv := bootstraptest.Start(t, opts)
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": "istio-system", "LABELS": map[string]any{"istio": "ingressgateway"}})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "router~10.244.9.9~istio-ingressgateway-0.istio-system~istio-system.svc.cluster.local", Metadata: md}
	for _, delta := range []bool{false, true} {
		name := "sotw"
		if delta {
			name = "delta"
		}
		t.Run(name, func(t *testing.T) {
			c := adsc.New(adsc.Config{Node: node, Delta: delta})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx, bootstraptest.Dial(t, srv.GRPCListenAddr())) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("ADS client: %v", err)
				}
			}()
			wait, stop := context.WithTimeout(ctx, 30*time.Second)
			defer stop()
			err := c.WaitFor(wait, func(c *adsc.Client) bool {
				_, ok := c.Resources(model.RouteType)["http.8080"]
				return ok
			})
			if err != nil {
				t.Fatalf("route http.8080 never arrived: %v (stats %+v)", err, c.Stats())
			}
			ls := c.Resources(model.ListenerType)
			if len(ls) != 1 || ls["0.0.0.0_8080"] == nil {
				t.Fatalf("listeners %v, want only 0.0.0.0_8080", keys(ls))
			}
			l := &listenerv3.Listener{}
			if err := ls["0.0.0.0_8080"].UnmarshalTo(l); err != nil {
				t.Fatal(err)
			}
			nt.ValidateRecursively(t, l)
			rc := &routev3.RouteConfiguration{}
			if err := c.Resources(model.RouteType)["http.8080"].UnmarshalTo(rc); err != nil {
				t.Fatal(err)
			}
			nt.ValidateRecursively(t, rc)
			if got := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); got != "outbound|9080||productpage.default.svc.cluster.local" {
				t.Errorf("first route to %q, want productpage", got)
			}
			if _, ok := c.Resources(model.ClusterType)["outbound|9080||productpage.default.svc.cluster.local"]; !ok {
				t.Error("the router has no productpage cluster")
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
