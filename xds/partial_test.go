package xds

import (
	"slices"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
)

// TestDeltaServiceChangeSendsOnlyThatService uses the real CDS and EDS
// generators (model.PartialGenerator): a push confined to one service
// regenerates and sends only that service's resources, and reports them
// removed when the service goes.
func TestDeltaServiceChangeSendsOnlyThatService(t *testing.T) {
	h := newHarness(t, true, func(_ *model.Environment, g *GeneratorTable) {
		g.Sidecar[model.ClusterType] = cluster.Generator{}
		g.Sidecar[model.EndpointType] = endpoint.Generator{}
	})
	// A first proxy fills the cache; the second reads its clusters from it.
	warm := h.delta()
	warm.send(&discovery.DeltaDiscoveryRequest{Node: testNode("pod0", nil), TypeUrl: model.ClusterType})
	warm.recv(model.ClusterType)
	c := h.delta()
	c.send(&discovery.DeltaDiscoveryRequest{Node: testNode("pod1", nil), TypeUrl: model.ClusterType})
	first := c.recv(model.ClusterType)
	c.send(deltaACK(first))
	if hits := value(t, h.metrics.XDSCacheReads.WithLabelValues("hit")); hits < 2 {
		t.Errorf("pilot_xds_cache_reads{type=hit} = %v, want the second proxy's 2 services", hits)
	}
	if size := value(t, h.metrics.XDSCacheSize); size < 3 {
		t.Errorf("pilot_xds_cache_size = %v, want at least 2 services and the built-in clusters", size)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: model.EndpointType, ResourceNamesSubscribe: []string{clusterA, "outbound|80||c.default.svc.cluster.local"}})
	e := c.recv(model.EndpointType)
	c.send(deltaACK(e))
	if len(e.GetResources()) != 2 {
		// An unknown cluster gets an empty assignment (see endpoint.Generator).
		t.Fatalf("EDS answered %v, want both subscribed names", deltaNames(e))
	}

	svcC := service("c", 80)
	h.reg.set(service("a", 80), service("b", 80), svcC)
	h.env.Endpoints.Update("k8s", svcC.Hostname, []*model.Endpoint{{Address: "10.1.0.9", Port: 80, ServicePortName: "http", Healthy: true}})
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonServiceUpdate,
		model.ConfigKey{Kind: model.KindService, Name: svcC.Hostname, Namespace: "default"},
		model.ConfigKey{Kind: model.KindEndpoints, Name: svcC.Hostname, Namespace: "default"}))
	p := c.recv(model.ClusterType)
	if got := deltaNames(p); !slices.Equal(got, []string{"outbound|80||c.default.svc.cluster.local"}) || len(p.GetRemovedResources()) != 0 {
		t.Fatalf("CDS push sent %v removed %v, want only c's cluster", got, p.GetRemovedResources())
	}
	c.send(deltaACK(p))
	pe := c.recv(model.EndpointType)
	if got := deltaNames(pe); !slices.Equal(got, []string{"outbound|80||c.default.svc.cluster.local"}) {
		t.Fatalf("EDS push sent %v, want only c's assignment", got)
	}
	c.send(deltaACK(pe))

	h.reg.set(service("a", 80), service("b", 80))
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonServiceUpdate, model.ConfigKey{Kind: model.KindService, Name: svcC.Hostname, Namespace: "default"}))
	p = c.recv(model.ClusterType)
	if len(p.GetResources()) != 0 || !slices.Equal(p.GetRemovedResources(), []string{"outbound|80||c.default.svc.cluster.local"}) {
		t.Fatalf("CDS push sent %v removed %v, want c's cluster removed", deltaNames(p), p.GetRemovedResources())
	}
	c.send(deltaACK(p))
	pe = c.recv(model.EndpointType)
	if len(pe.GetResources()) != 1 || len(pe.GetRemovedResources()) != 0 {
		// The subscribed assignment of a gone service is resent, empty.
		t.Fatalf("EDS push sent %v removed %v, want c's assignment (now empty)", deltaNames(pe), pe.GetRemovedResources())
	}
}
