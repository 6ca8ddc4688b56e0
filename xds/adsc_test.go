package xds

import (
	"context"
	"testing"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestADSCClientsConverge runs the project's Envoy-like ADS client (CDS then
// EDS for the clusters CDS names, ACKing everything) in both modes.
func TestADSCClientsConverge(t *testing.T) {
	for _, delta := range []bool{false, true} {
		name := "sotw"
		if delta {
			name = "delta"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, true)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			c := adsc.New(adsc.Config{Node: testNode("adsc", nil), Delta: delta, Types: []string{model.ClusterType, model.EndpointType}})
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx, h.conn) }()
			count := func(typeURL string, n int) func(*adsc.Client) bool {
				return func(c *adsc.Client) bool { return len(c.Resources(typeURL)) == n }
			}
			if err := c.WaitFor(ctx, func(c *adsc.Client) bool {
				return count(model.ClusterType, 2)(c) && count(model.EndpointType, 2)(c)
			}); err != nil {
				t.Fatal(err)
			}
			h.reg.set(service("a", 80))
			h.fullPush()
			if err := c.WaitFor(ctx, count(model.ClusterType, 1)); err != nil {
				t.Fatal(err)
			}
			if st := c.Stats(); st.NACKs[model.ClusterType]+st.NACKs[model.EndpointType] != 0 {
				t.Fatalf("client NACKed: %+v", st)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("client Run: %v", err)
			}
		})
	}
}
