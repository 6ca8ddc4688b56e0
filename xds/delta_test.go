package xds

import (
	"slices"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/meshpilot/meshpilot/model"
)

// initialDeltaCDS opens a Delta stream subscribing to CDS as a wildcard.
func initialDeltaCDS(h *harness, pod string, initial map[string]string) (*deltaClient, *discovery.DeltaDiscoveryResponse) {
	h.t.Helper()
	c := h.delta()
	c.send(&discovery.DeltaDiscoveryRequest{Node: testNode(pod, nil), TypeUrl: model.ClusterType, InitialResourceVersions: initial})
	return c, c.recv(model.ClusterType)
}

func deltaACK(r *discovery.DeltaDiscoveryResponse) *discovery.DeltaDiscoveryRequest {
	return &discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}
}

func TestDeltaWildcardCDSInitial(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialDeltaCDS(h, "pod1", nil)
	if got := deltaNames(r); !slices.Equal(got, []string{clusterA, clusterB}) {
		t.Fatalf("initial resources %v", got)
	}
	if len(r.GetRemovedResources()) != 0 || r.GetNonce() == "" || r.GetSystemVersionInfo() != h.s.PushContext().Version {
		t.Fatalf("bad initial response: %v", r)
	}
	c.send(deltaACK(r))
	eventually(t, "ACK recorded", func() bool {
		st := h.s.SyncStatus()
		return len(st) == 1 && st[0].Delta && st[0].Types["cds"].Wildcard && st[0].Types["cds"].AckedNonce == r.GetNonce()
	})
}

func TestDeltaChangeSendsOnlyChangedThenRemoved(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialDeltaCDS(h, "pod1", nil)
	c.send(deltaACK(r))

	// b gains a port: only b's new cluster is sent; a is unchanged.
	b := service("b", 80)
	b.Ports = append(b.Ports, model.Port{Name: "http-alt", Port: 9080, Protocol: model.ProtocolHTTP})
	h.reg.set(service("a", 80), b)
	h.fullPush()
	p := c.recv(model.ClusterType)
	if got := deltaNames(p); !slices.Equal(got, []string{"outbound|9080||b.default.svc.cluster.local"}) || len(p.GetRemovedResources()) != 0 {
		t.Fatalf("change sent %v removed %v", got, p.GetRemovedResources())
	}
	c.send(deltaACK(p))

	// b disappears: both its clusters are removed, nothing is resent.
	h.reg.set(service("a", 80))
	h.fullPush()
	p = c.recv(model.ClusterType)
	if len(p.GetResources()) != 0 || !slices.Equal(p.GetRemovedResources(), []string{clusterB, "outbound|9080||b.default.svc.cluster.local"}) {
		t.Fatalf("removal sent %v removed %v", deltaNames(p), p.GetRemovedResources())
	}
}

func TestDeltaNACKAndStaleNonce(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialDeltaCDS(h, "pod1", nil)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: model.ClusterType, ResponseNonce: r.GetNonce(), ErrorDetail: &status.Status{Message: "rejected"}})
	eventually(t, "cds reject metric", func() bool { return value(t, h.metrics.Rejects["cds"]) == 1 })
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: model.ClusterType, ResponseNonce: "stale"})
	eventually(t, "expired nonce metric", func() bool { return value(t, h.metrics.ExpiredNonce.WithLabelValues("cds")) == 1 })
	// The stream lives on and pushes still arrive.
	h.reg.set(service("a", 80))
	h.fullPush()
	p := c.recv(model.ClusterType)
	if !slices.Equal(p.GetRemovedResources(), []string{clusterB}) {
		t.Fatalf("push after NACK removed %v", p.GetRemovedResources())
	}
}

func TestDeltaEDSSubscribeUnsubscribe(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialDeltaCDS(h, "pod1", nil)
	c.send(deltaACK(r))
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: model.EndpointType, ResourceNamesSubscribe: []string{clusterA, clusterB, "outbound|1||missing.default.svc.cluster.local"}})
	e := c.recv(model.EndpointType)
	if got := deltaNames(e); !slices.Equal(got, []string{clusterA, clusterB}) {
		t.Fatalf("subscribed endpoints %v", got)
	}
	if !slices.Equal(e.GetRemovedResources(), []string{"outbound|1||missing.default.svc.cluster.local"}) {
		t.Fatalf("absent subscribed resource not reported removed: %v", e.GetRemovedResources())
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: model.EndpointType, ResponseNonce: e.GetNonce(), ResourceNamesUnsubscribe: []string{clusterB}})
	u := c.recv(model.EndpointType)
	if len(u.GetResources()) != 0 || !slices.Equal(u.GetRemovedResources(), []string{clusterB}) {
		t.Fatalf("unsubscribe answered %v removed %v", deltaNames(u), u.GetRemovedResources())
	}
	c.send(deltaACK(u))

	// Endpoints of the unsubscribed b change: nothing is sent. Then a's change arrives alone.
	hostB, hostA := "b.default.svc.cluster.local", "a.default.svc.cluster.local"
	h.env.Endpoints.Update("k8s", hostB, []*model.Endpoint{{Address: "10.1.0.2", Port: 80, ServicePortName: "http"}})
	h.s.ConfigUpdate(model.NewPushRequest(false, model.ReasonEndpointUpdate, model.ConfigKey{Kind: model.KindEndpoints, Name: hostB}))
	h.env.Endpoints.Update("k8s", hostA, []*model.Endpoint{{Address: "10.1.0.1", Port: 80, ServicePortName: "http"}})
	h.s.ConfigUpdate(model.NewPushRequest(false, model.ReasonEndpointUpdate, model.ConfigKey{Kind: model.KindEndpoints, Name: hostA}))
	p := c.recv(model.EndpointType)
	if got := deltaNames(p); !slices.Equal(got, []string{clusterA}) || len(p.GetRemovedResources()) != 0 {
		t.Fatalf("EDS push sent %v removed %v", got, p.GetRemovedResources())
	}
	if st := h.s.SyncStatus(); !slices.Equal(st[0].Types["eds"].Subscribed, []string{"outbound|1||missing.default.svc.cluster.local", clusterA}) {
		t.Fatalf("syncz subscribed %v", st[0].Types["eds"].Subscribed)
	}
}

func TestDeltaInitialResourceVersionsSuppressUnchanged(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialDeltaCDS(h, "pod1", nil)
	versions := map[string]string{}
	for _, res := range r.GetResources() {
		versions[res.GetName()] = res.GetVersion()
	}
	c.cancel()
	eventually(t, "first connection gone", func() bool { return len(h.s.SyncStatus()) == 0 })

	// Reconnect: a is current, b is outdated, "gone" no longer exists.
	initial := map[string]string{clusterA: versions[clusterA], clusterB: "outdated", "outbound|80||gone.default.svc.cluster.local": "x"}
	_, r2 := initialDeltaCDS(h, "pod1", initial)
	if got := deltaNames(r2); !slices.Equal(got, []string{clusterB}) {
		t.Fatalf("reconnect resent %v, want only %s", got, clusterB)
	}
	if r2.GetResources()[0].GetVersion() != versions[clusterB] {
		t.Errorf("version of %s changed without a content change", clusterB)
	}
	if !slices.Equal(r2.GetRemovedResources(), []string{"outbound|80||gone.default.svc.cluster.local"}) {
		t.Fatalf("reconnect removed %v", r2.GetRemovedResources())
	}
}

// Adding a name to a by-name watch is answered about that name alone: the
// names already held are neither resent nor reported removed, and stay
// subscribed.
func TestDeltaAddedSubscriptionAnsweredAlone(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialDeltaCDS(h, "pod1", nil)
	c.send(deltaACK(r))
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: model.EndpointType, ResourceNamesSubscribe: []string{clusterA}})
	e := c.recv(model.EndpointType)
	if got := deltaNames(e); !slices.Equal(got, []string{clusterA}) {
		t.Fatalf("first subscription answered %v", got)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: model.EndpointType, ResponseNonce: e.GetNonce(), ResourceNamesSubscribe: []string{clusterB}})
	b := c.recv(model.EndpointType)
	if got := deltaNames(b); !slices.Equal(got, []string{clusterB}) || len(b.GetRemovedResources()) != 0 {
		t.Fatalf("added subscription answered %v removed %v", got, b.GetRemovedResources())
	}
	c.send(deltaACK(b))
	hostA := "a.default.svc.cluster.local"
	h.env.Endpoints.Update("k8s", hostA, []*model.Endpoint{{Address: "10.1.0.9", Port: 80, ServicePortName: "http"}})
	h.s.ConfigUpdate(model.NewPushRequest(false, model.ReasonEndpointUpdate, model.ConfigKey{Kind: model.KindEndpoints, Name: hostA}))
	p := c.recv(model.EndpointType)
	if got := deltaNames(p); !slices.Equal(got, []string{clusterA}) {
		t.Fatalf("the first name is no longer watched: push sent %v", got)
	}
}
