package xds

import (
	"context"
	"maps"
	"slices"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

var clusterC = "outbound|80||c.default.svc.cluster.local"

// realCDSEDS uses the real CDS and EDS generators.
func realCDSEDS(_ *model.Environment, g *GeneratorTable) {
	g.Sidecar[model.ClusterType] = cluster.Generator{}
	g.Sidecar[model.EndpointType] = endpoint.Generator{}
}

// sortedSotWNames returns the resource names of r, sorted.
func sortedSotWNames(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	names := sotwNames(t, r)
	slices.Sort(names)
	return names
}

// TestSotWEDSPartialAnswers walks one SotW stream through the cases of
// partial EDS answers, over a real stream with the real generators: a
// request that only adds names is answered with those names' assignments
// alone; a request repeating the subscription (in any order) is answered
// with nothing; a push for a service the proxy does not watch sends no EDS;
// an endpoint change resends the complete set; a request that removes a
// name is answered with the complete set.
func TestSotWEDSPartialAnswers(t *testing.T) {
	h := newHarness(t, true, realCDSEDS)
	c, r := initialCDS(h, "pod1")
	c.send(ack(r))
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	e := c.recvType(model.EndpointType)
	if got := sotwNames(t, e); !slices.Equal(got, []string{clusterA}) {
		t.Fatalf("initial EDS = %v", got)
	}

	c.send(ack(e, clusterA, clusterB))
	e = c.recvType(model.EndpointType)
	if got := sotwNames(t, e); !slices.Equal(got, []string{clusterB}) {
		t.Fatalf("EDS after adding b = %v, want b's assignment alone", got)
	}
	// The same subscription, then the same set in another order: no answer.
	c.send(ack(e, clusterA, clusterB))
	c.send(ack(e, clusterB, clusterA))

	// A new service c: CDS is pushed, EDS is not (the proxy watches no
	// cluster of c). Responses are sent in order, so the next EDS response
	// must be the answer to the request adding c, with c's assignment alone.
	svcC := service("c", 80)
	h.reg.set(service("a", 80), service("b", 80), svcC)
	h.env.Endpoints.Update("k8s", svcC.Hostname, []*model.Endpoint{{Address: "10.1.0.9", Port: 80, ServicePortName: "http", Healthy: true}})
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonServiceUpdate,
		model.ConfigKey{Kind: model.KindService, Name: svcC.Hostname, Namespace: "default"},
		model.ConfigKey{Kind: model.KindEndpoints, Name: svcC.Hostname, Namespace: "default"}))
	p := c.recvType(model.ClusterType)
	if got := sotwNames(t, p); !slices.Contains(got, clusterC) || !slices.Contains(got, clusterA) {
		t.Fatalf("CDS push = %v, want every cluster, c's among them", got)
	}
	c.send(ack(p))
	c.send(ack(e, clusterA, clusterB, clusterC))
	e = c.recvType(model.EndpointType)
	if got := sotwNames(t, e); !slices.Equal(got, []string{clusterC}) {
		t.Fatalf("EDS after the push and adding c = %v, want c's assignment alone (no EDS push before it)", got)
	}
	if n := lbEndpoints(t, e, clusterC); n != 1 {
		t.Errorf("c's assignment has %d endpoints, want 1", n)
	}
	c.send(ack(e, clusterA, clusterB, clusterC))

	// An endpoint change of a watched service: the complete set, a's new endpoint in it.
	h.env.Endpoints.Update("k8s", "a.default.svc.cluster.local", []*model.Endpoint{{Address: "10.1.0.1", Port: 80, ServicePortName: "http", Healthy: true}})
	h.s.ConfigUpdate(model.NewPushRequest(false, model.ReasonEndpointUpdate, model.ConfigKey{Kind: model.KindEndpoints, Name: "a.default.svc.cluster.local", Namespace: "default"}))
	e = c.recvType(model.EndpointType)
	if got := sortedSotWNames(t, e); !slices.Equal(got, []string{clusterA, clusterB, clusterC}) {
		t.Fatalf("EDS push = %v, want the complete set", got)
	}
	if n := lbEndpoints(t, e, clusterA); n != 1 {
		t.Errorf("a's assignment has %d endpoints, want 1", n)
	}
	c.send(ack(e, clusterA, clusterB, clusterC))

	// Removing a name: the complete remaining set.
	c.send(ack(e, clusterB, clusterC))
	e = c.recvType(model.EndpointType)
	if got := sortedSotWNames(t, e); !slices.Equal(got, []string{clusterB, clusterC}) {
		t.Fatalf("EDS after removing a = %v, want b and c", got)
	}
	// The server counts a push after Send returns, which may be after the
	// client read it.
	eventually(t, "pilot_xds_pushes{type=eds} = 5 (initial, b, c, a's endpoints, removal)", func() bool {
		return value(t, h.metrics.Pushes.WithLabelValues("eds")) == 5
	})
}

// TestSotWEDSPartialThenUnchangedPushSendsNothing checks the bookkeeping of
// a partial answer: after it, the client holds the old set plus the new
// names, so a full push that regenerates exactly that set sends no EDS.
func TestSotWEDSPartialThenUnchangedPushSendsNothing(t *testing.T) {
	h := newHarness(t, true, realCDSEDS)
	c, r := initialCDS(h, "pod1")
	c.send(ack(r))
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	e := c.recvType(model.EndpointType)
	c.send(ack(e, clusterA, clusterB))
	e = c.recvType(model.EndpointType)
	c.send(ack(e, clusterA, clusterB))

	// A full push with no keys (a new service c) regenerates every type;
	// EDS is what the client holds, so only CDS is sent: the next EDS
	// response must be the answer to the next request (a removal, answered
	// with the whole set).
	h.reg.set(service("a", 80), service("b", 80), service("c", 80))
	h.fullPush()
	p := c.recvType(model.ClusterType)
	c.send(ack(p))
	c.send(ack(e, clusterB))
	e = c.recvType(model.EndpointType)
	if got := sotwNames(t, e); !slices.Equal(got, []string{clusterB}) {
		t.Fatalf("EDS = %v, want the answer to the removal (b), not a push", got)
	}
}

// lbEndpoints counts the endpoints of cluster name in EDS response r.
func lbEndpoints(t *testing.T, r *discovery.DiscoveryResponse, name string) int {
	t.Helper()
	for _, a := range r.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		if cla.GetClusterName() != name {
			continue
		}
		n := 0
		for _, l := range cla.GetEndpoints() {
			n += len(l.GetLbEndpoints())
		}
		return n
	}
	t.Fatalf("no assignment of %s in %v", name, sotwNames(t, r))
	return 0
}

// TestADSCKeepsEDSAcrossPartialAnswers runs the project's Envoy-like client
// (xds/adsc, which pilot-load uses) against partial EDS answers: it keeps
// the assignments a response leaves out, as Envoy and grpc-go do, and drops
// the ones it no longer subscribes.
func TestADSCKeepsEDSAcrossPartialAnswers(t *testing.T) {
	h := newHarness(t, true, realCDSEDS)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c := adsc.New(adsc.Config{Node: testNode("adsc", nil), Types: []string{model.ClusterType, model.EndpointType}})
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, h.conn) }()
	holds := func(names ...string) func(*adsc.Client) bool {
		return func(c *adsc.Client) bool {
			got := slices.Sorted(maps.Keys(c.Resources(model.EndpointType)))
			return slices.Equal(got, names)
		}
	}
	if err := c.WaitFor(ctx, holds(clusterA, clusterB)); err != nil {
		t.Fatalf("initial EDS: %v (holds %v)", err, slices.Sorted(maps.Keys(c.Resources(model.EndpointType))))
	}
	// The server counts a response after Send returns, which may be after
	// the client read it: wait for the counts.
	eds := func() float64 { return value(t, h.metrics.Pushes.WithLabelValues("eds")) }
	eventually(t, "one EDS response counted (a and b)", func() bool { return eds() == 1 })

	h.reg.set(service("a", 80), service("b", 80), service("c", 80))
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonServiceUpdate, model.ConfigKey{Kind: model.KindService, Name: "c.default.svc.cluster.local", Namespace: "default"}))
	if err := c.WaitFor(ctx, holds(clusterA, clusterB, clusterC)); err != nil {
		t.Fatalf("after adding c: %v (holds %v)", err, slices.Sorted(maps.Keys(c.Resources(model.EndpointType))))
	}
	eventually(t, "one more EDS response counted, the answer about c", func() bool { return eds() == 2 })

	h.reg.set(service("b", 80), service("c", 80))
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonServiceUpdate, model.ConfigKey{Kind: model.KindService, Name: "a.default.svc.cluster.local", Namespace: "default"}))
	if err := c.WaitFor(ctx, holds(clusterB, clusterC)); err != nil {
		t.Fatalf("after removing a: %v (holds %v)", err, slices.Sorted(maps.Keys(c.Resources(model.EndpointType))))
	}
	if st := c.Stats(); st.NACKs[model.ClusterType]+st.NACKs[model.EndpointType] != 0 {
		t.Fatalf("client NACKed: %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("client Run: %v", err)
	}
}
