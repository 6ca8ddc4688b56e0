package serviceentry_test

import (
	"context"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// waitClient waits until cond holds for c (30 s at most); a failure names
// the legacy cluster's endpoints at that moment.
func waitClient(t *testing.T, c *adsc.Client, what string, cond func(*adsc.Client) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v (endpoints now %v)", what, err, c.HealthyEndpoints(legacyCluster))
	}
}

// loadAssignment decodes one EDS resource the client holds and checks it
// passes ValidateAll.
func loadAssignment(t *testing.T, c *adsc.Client, cluster string) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	a := c.Resources(model.EndpointType)[cluster]
	if a == nil {
		t.Fatalf("no EDS resource %s", cluster)
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := a.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	if err := networkingtest.Validate(cla); err != nil {
		t.Errorf("EDS %s: %v", cluster, err)
	}
	return cla
}
