package xds

import (
	"slices"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/model"
)

var (
	clusterA = "outbound|80||a.default.svc.cluster.local"
	clusterB = "outbound|80||b.default.svc.cluster.local"
)

// initialCDS opens a stream and returns it with its first CDS response.
func initialCDS(h *harness, pod string) (*sotwClient, *discovery.DiscoveryResponse) {
	h.t.Helper()
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{Node: testNode(pod, nil), TypeUrl: model.ClusterType})
	return c, c.recvType(model.ClusterType)
}

func ack(r *discovery.DiscoveryResponse, names ...string) *discovery.DiscoveryRequest {
	return &discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names}
}

func TestSotWInitialCDSThenACKDoesNotResend(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialCDS(h, "pod1")
	if r.GetNonce() == "" || r.GetVersionInfo() == "" {
		t.Fatalf("response lacks nonce or version: %v", r)
	}
	if !strings.HasPrefix(r.GetVersionInfo(), h.s.PushContext().Version+"/") {
		t.Errorf("version %q does not name the PushContext %q", r.GetVersionInfo(), h.s.PushContext().Version)
	}
	if got := sotwNames(t, r); !slices.Equal(got, []string{clusterA, clusterB}) {
		t.Fatalf("clusters = %v", got)
	}
	c.send(ack(r))
	// Requests are handled in order: the next response must be EDS, not a CDS resend.
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	e := c.recvType(model.EndpointType)
	if got := sotwNames(t, e); !slices.Equal(got, []string{clusterA}) {
		t.Fatalf("endpoints = %v", got)
	}
	st := h.s.SyncStatus()
	if len(st) != 1 || st[0].Types["cds"].AckedNonce != r.GetNonce() || st[0].Types["cds"].AckedVersion != r.GetVersionInfo() {
		t.Fatalf("syncz does not show the ACK: %+v", st)
	}
	if !strings.HasPrefix(st[0].ConnectionID, "pod1.default-") {
		t.Errorf("connection id %q, want pod1.default-N", st[0].ConnectionID)
	}
	if got := value(t, h.metrics.Pushes.WithLabelValues("cds")); got != 1 {
		t.Errorf("pilot_xds_pushes{type=cds} = %v, want 1", got)
	}
	if got := value(t, h.metrics.XDSClients.WithLabelValues("1.31.1")); got != 1 {
		t.Errorf("pilot_xds{version=1.31.1} = %v, want 1", got)
	}
}

func TestSotWNACKKeepsStreamAndLaterPushesWork(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialCDS(h, "pod1")
	nack := ack(r)
	nack.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: "bad cluster"}
	c.send(nack)
	eventually(t, "cds reject metric", func() bool { return value(t, h.metrics.Rejects["cds"]) == 1 })
	if got := value(t, h.metrics.TotalRejects.WithLabelValues("cds")); got != 1 {
		t.Errorf("pilot_total_xds_rejects{type=cds} = %v", got)
	}
	if st := h.s.SyncStatus(); st[0].Types["cds"].NackError != "bad cluster" || st[0].Types["cds"].NackAt == nil {
		t.Errorf("syncz does not show the NACK: %+v", st[0].Types["cds"])
	}

	h.reg.set(service("a", 80), service("b", 80), service("c", 80))
	h.fullPush()
	p := c.recvType(model.ClusterType)
	if p.GetVersionInfo() == r.GetVersionInfo() || p.GetNonce() == r.GetNonce() {
		t.Fatalf("push reused version %q / nonce %q", p.GetVersionInfo(), p.GetNonce())
	}
	if got := sotwNames(t, p); len(got) != 3 {
		t.Fatalf("pushed clusters = %v, want 3", got)
	}
}

func TestSotWStaleNonceIgnored(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialCDS(h, "pod1")
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.ClusterType, VersionInfo: r.GetVersionInfo(), ResponseNonce: "not-the-nonce"})
	eventually(t, "expired nonce metric", func() bool {
		return value(t, h.metrics.ExpiredNonce.WithLabelValues("cds")) == 1
	})
	// An ACK of a type never sent is stale too.
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResponseNonce: "never-sent"})
	eventually(t, "expired nonce metric for eds", func() bool {
		return value(t, h.metrics.ExpiredNonce.WithLabelValues("eds")) == 1
	})
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterB}})
	c.recvType(model.EndpointType) // no CDS response came before it
	if got := value(t, h.metrics.Rejects["cds"]); got != 0 {
		t.Errorf("stale nonce counted as reject: %v", got)
	}
}

func TestSotWEDSSubscriptionChangeOnACK(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialCDS(h, "pod1")
	c.send(ack(r))
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	e := c.recvType(model.EndpointType)
	c.send(ack(e, clusterA, clusterB))
	e2 := c.recvType(model.EndpointType)
	// EDS responses need not be complete: the added name's alone answers it
	// (sotw_partial_test.go).
	if got := sotwNames(t, e2); !slices.Equal(got, []string{clusterB}) {
		t.Fatalf("after subscription change got %v", got)
	}
	// An ACK with the same names sends nothing: the next response answers the LDS-less CDS request.
	c.send(ack(e2, clusterB, clusterA))
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.ClusterType})
	c.recvType(model.ClusterType)
}

func TestSotWPushReachesClientWithNewVersion(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialCDS(h, "pod1")
	c.send(ack(r))
	before := h.s.PushContext().Version
	h.reg.set(service("a", 80))
	h.fullPush()
	p := c.recvType(model.ClusterType)
	if h.s.PushContext().Version == before {
		t.Fatal("full push did not build a new PushContext")
	}
	if !strings.HasPrefix(p.GetVersionInfo(), h.s.PushContext().Version+"/") {
		t.Errorf("pushed version %q, want the new PushContext %q", p.GetVersionInfo(), h.s.PushContext().Version)
	}
	if got := sotwNames(t, p); !slices.Equal(got, []string{clusterA}) {
		t.Fatalf("pushed clusters %v", got)
	}
	eventually(t, "convergence time observed", func() bool { return histogramCount(t, h.metrics.ConvergenceTime) > 0 })
	if got := value(t, h.metrics.Services); got != 1 {
		t.Errorf("pilot_services = %v, want 1", got)
	}
}

func TestSotWReconnectGetsFullConfig(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialCDS(h, "pod1")
	c.send(ack(r))
	c.cancel()
	eventually(t, "first connection gone", func() bool { return len(h.s.SyncStatus()) == 0 })

	c2 := h.sotw()
	c2.send(&discovery.DiscoveryRequest{Node: testNode("pod1", nil), TypeUrl: model.ClusterType, VersionInfo: r.GetVersionInfo()})
	r2 := c2.recvType(model.ClusterType)
	if got := sotwNames(t, r2); !slices.Equal(got, []string{clusterA, clusterB}) {
		t.Fatalf("reconnect got %v", got)
	}
	if r2.GetNonce() == r.GetNonce() {
		t.Error("nonce reused across streams")
	}
}

func TestSotWMalformedRequestEndsOnlyItsStream(t *testing.T) {
	h := newHarness(t, true)
	good, _ := initialCDS(h, "good")

	for name, req := range map[string]*discovery.DiscoveryRequest{
		"node":    {TypeUrl: model.ClusterType},
		"node.id": {Node: badNode(), TypeUrl: model.ClusterType},
	} {
		bad := h.sotw()
		bad.send(req)
		err := bad.streamErr()
		if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: got %v, want InvalidArgument naming %q", name, err, name)
		}
	}
	// A request without type_url after a valid node.
	bad := h.sotw()
	bad.send(&discovery.DiscoveryRequest{Node: testNode("bad", nil)})
	if err := bad.streamErr(); grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "type_url") {
		t.Errorf("missing type_url: got %v", err)
	}

	// The good stream still works, and an unknown type is ignored, not fatal.
	good.send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/unknown.Type"})
	good.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	good.recvType(model.EndpointType)
}

func TestSotWNotReadyRefusesWithUnavailable(t *testing.T) {
	h := newHarness(t, false)
	c := h.sotw()
	if err := c.streamErr(); grpcstatus.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("got %v, want Unavailable not ready", err)
	}
	d := h.delta()
	select {
	case err := <-d.errc:
		if grpcstatus.Code(err) != codes.Unavailable {
			t.Fatalf("delta got %v, want Unavailable", err)
		}
	case <-d.resps:
		t.Fatal("delta got a response before ready")
	}
	if h.s.Ready() || h.s.PushContext() != nil {
		t.Fatal("ready before MarkReady")
	}
	h.s.MarkReady()
	_, r := initialCDS(h, "pod1")
	if len(r.GetResources()) != 2 {
		t.Fatalf("after MarkReady got %d clusters", len(r.GetResources()))
	}
}

func TestSotWGeneratorErrorKeepsStream(t *testing.T) {
	h := newHarness(t, true)
	c, _ := initialCDS(h, "pod1")
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.ListenerType})
	eventually(t, "lds build error metric", func() bool {
		return value(t, h.metrics.Pushes.WithLabelValues("lds_builderr")) == 1
	})
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	c.recvType(model.EndpointType)
}

func TestSotWGRPCClientUsesGRPCTable(t *testing.T) {
	h := newHarness(t, true)
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{Node: testNode("grpc1", map[string]any{"GENERATOR": "grpc"}), TypeUrl: model.ClusterType})
	r := c.recvType(model.ClusterType)
	if got := sotwNames(t, r); !slices.Equal(got, []string{"grpc-" + clusterA, "grpc-" + clusterB}) {
		t.Fatalf("grpc clusters %v", got)
	}
	if got := value(t, h.metrics.XDSClients.WithLabelValues("unknown")); got != 1 {
		t.Errorf("pilot_xds{version=unknown} = %v, want 1", got)
	}
	// The GRPC table has no EDS generator: the request is ignored.
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.ClusterType, ResponseNonce: r.GetNonce(), VersionInfo: r.GetVersionInfo(), ResourceNames: []string{"grpc-" + clusterA}})
	r2 := c.recvType(model.ClusterType)
	if got := sotwNames(t, r2); !slices.Equal(got, []string{"grpc-" + clusterA}) {
		t.Fatalf("grpc clusters after subscription change %v", got)
	}
}

func TestEDSOnlyPushDoesNotRebuildPushContext(t *testing.T) {
	h := newHarness(t, true)
	c, r := initialCDS(h, "pod1")
	c.send(ack(r))
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	e := c.recvType(model.EndpointType)
	c.send(ack(e, clusterA))
	// A second proxy that does not watch the changed cluster.
	other, _ := initialCDS(h, "pod2")

	builds := histogramCount(t, h.metrics.PushContextInitTime)
	version := h.s.PushContext().Version
	seq := h.s.PushSeq()
	host := "a.default.svc.cluster.local"
	h.env.Endpoints.Update("k8s", host, []*model.Endpoint{{Address: "10.1.0.7", Port: 8080, ServicePortName: "http", Healthy: true}})
	h.s.ConfigUpdate(model.NewPushRequest(false, model.ReasonEndpointUpdate, model.ConfigKey{Kind: model.KindEndpoints, Name: host, Namespace: "default"}))

	p := c.recvType(model.EndpointType)
	if !strings.Contains(p.GetResources()[0].String(), "10.1.0.7") {
		t.Fatalf("pushed endpoints lack the new address: %v", p.GetResources()[0])
	}
	eventually(t, "push round", func() bool { return h.s.PushSeq() > seq })
	if got := histogramCount(t, h.metrics.PushContextInitTime); got != builds {
		t.Fatalf("EDS-only push built a PushContext: %d builds, want %d", got, builds)
	}
	if h.s.PushContext().Version != version {
		t.Fatal("EDS-only push replaced the PushContext")
	}
	// The other proxy got nothing: its next response answers its own request.
	other.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterB}})
	other.recvType(model.EndpointType)
}
