package serviceentry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
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

func isEDSCluster(c *adsc.Client, name string) bool {
	cl := &clusterv3.Cluster{}
	a := c.Resources(model.ClusterType)[name]
	return a != nil && a.UnmarshalTo(cl) == nil && cl.GetType() == clusterv3.Cluster_EDS
}

// metric returns the sample of name with exactly labels from /metrics, 0
// when absent.
func metric(t *testing.T, srv *bootstrap.Server, name string, labels ...string) float64 {
	t.Helper()
	if len(labels) > 0 {
		name += "{" + strings.Join(labels, ",") + "}"
	}
	v, _ := bootstraptest.Metric(t, srv, name)
	return v
}
