package xds

import (
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/internal/nds"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/nametable"
)

const dbHost = "db.default.svc.cluster.local"

// headlessHarness serves a headless service db (two ports) and a ClusterIP
// service a, with the real NDS generator; db starts with one ready pod.
func headlessHarness(t *testing.T) *harness {
	t.Helper()
	gen, err := nametable.New()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, false, func(env *model.Environment, gens *GeneratorTable) {
		gens.Sidecar[model.NameTableType] = gen
		env.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	})
	db := &model.Service{Hostname: dbHost, Name: "db", Namespace: "default", Resolution: model.Passthrough,
		Ports: []model.Port{{Name: "tcp", Port: 5432, Protocol: model.ProtocolTCP}}, Registry: model.RegistryKubernetes}
	h.reg.set(service("a", 80), db)
	applyHeadless(t, h, []*model.Endpoint{dbEndpoint("10.1.0.1", "db-0", true)}, false)
	h.s.MarkReady()
	return h
}

func dbEndpoint(ip, pod string, ready bool) *model.Endpoint {
	return &model.Endpoint{Address: ip, Port: 5432, ServicePortName: "tcp", Healthy: ready, Namespace: "default",
		ServiceAccount: "spiffe://cluster.local/ns/default/sa/db", WorkloadName: pod, HostName: pod}
}

// applyHeadless writes db's endpoints as the Kubernetes registry does and,
// with push, hands the server the request the kube source would, checking
// the change was endpoint-only.
func applyHeadless(t *testing.T, h *harness, eps []*model.Endpoint, push bool) {
	t.Helper()
	svcs := map[string]*model.Service{}
	for _, s := range h.reg.Services() {
		if s.Hostname == dbHost {
			svcs[dbHost] = s
		}
	}
	ch := model.ApplyRegistryState(h.env.Endpoints, "Kubernetes", svcs, svcs, map[string][]*model.Endpoint{dbHost: eps})
	if push && (len(ch.Services) != 0 || len(ch.Endpoints) != 1) {
		t.Fatalf("headless endpoint change reported as %+v, want one endpoint-only change", ch)
	}
	if push {
		h.s.ConfigUpdate(model.NewPushRequest(false, model.ReasonEndpointUpdate, ch.Endpoints...))
	}
}

// recvNameTable waits for c's next response, which must be a name table.
func recvNameTable(t *testing.T, c *sotwClient) nds.NameTable {
	t.Helper()
	var r *discovery.DiscoveryResponse
	select {
	case r = <-c.resps:
	case err := <-c.errc:
		t.Fatalf("stream ended: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for a name table")
	}
	if r.GetTypeUrl() != model.NameTableType || len(r.GetResources()) != 1 {
		t.Fatalf("got %s with %d resources, want one name table", r.GetTypeUrl(), len(r.GetResources()))
	}
	d, err := nds.NewDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	table, err := d.UnmarshalAny(r.GetResources()[0])
	if err != nil {
		t.Fatal(err)
	}
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.NameTableType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
	return table
}

// TestHeadlessEndpointChangeIsNotFull: a pod of a headless service that
// comes, goes ready or not ready, or is replaced reaches the DNS name table
// of a proxy watching NDS through an EDS-only push: no new PushContext, no
// CDS (istio/istio#33969: headless services cost a full push per change).
func TestHeadlessEndpointChangeIsNotFull(t *testing.T) {
	h := headlessHarness(t)
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{Node: testNode("client", nil), TypeUrl: model.ClusterType})
	r := c.recvType(model.ClusterType)
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.ClusterType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.NameTableType})
	if got := recvNameTable(t, c)[dbHost].IPs; !slices.Equal(got, []string{"10.1.0.1"}) {
		t.Fatalf("db in the first name table: %v, want [10.1.0.1]", got)
	}

	pc := h.s.PushContext()
	builds := histogramCount(t, h.metrics.PushContextInitTime)
	cds := value(t, h.metrics.Pushes.WithLabelValues("cds"))
	steps := []struct {
		name    string
		eps     []*model.Endpoint
		wantIPs []string
		wantPod string // a pod name the table must list ("" for none)
	}{
		{"a second pod, not ready", []*model.Endpoint{dbEndpoint("10.1.0.1", "db-0", true), dbEndpoint("10.1.0.2", "db-1", false)}, nil, ""},
		{"the second pod ready", []*model.Endpoint{dbEndpoint("10.1.0.1", "db-0", true), dbEndpoint("10.1.0.2", "db-1", true)}, []string{"10.1.0.1", "10.1.0.2"}, "db-1"},
		{"the first pod terminating", []*model.Endpoint{dbEndpoint("10.1.0.1", "db-0", false), dbEndpoint("10.1.0.2", "db-1", true)}, []string{"10.1.0.2"}, "db-1"},
		{"the first pod replaced", []*model.Endpoint{dbEndpoint("10.1.0.2", "db-1", true), dbEndpoint("10.1.0.3", "db-0", true)}, []string{"10.1.0.2", "10.1.0.3"}, "db-0"},
	}
	for _, st := range steps {
		applyHeadless(t, h, st.eps, true)
		if st.wantIPs == nil {
			continue // the name table is unchanged: SotW sends nothing
		}
		table := recvNameTable(t, c)
		if got := table[dbHost].IPs; !slices.Equal(got, st.wantIPs) {
			t.Fatalf("%s: db resolves to %v, want %v", st.name, got, st.wantIPs)
		}
		pod := st.wantPod + ".db.default.svc.cluster.local"
		if ni, ok := table[pod]; !ok || len(ni.IPs) != 1 {
			t.Fatalf("%s: name table lacks pod name %s: %v", st.name, pod, table)
		}
	}
	if h.s.PushContext() != pc {
		t.Error("a headless endpoint change rebuilt the PushContext")
	}
	if got := histogramCount(t, h.metrics.PushContextInitTime); got != builds {
		t.Errorf("pilot_pushcontext_init_seconds count went from %d to %d", builds, got)
	}
	if got := value(t, h.metrics.Pushes.WithLabelValues("cds")); got != cds {
		t.Errorf("pilot_xds_pushes{type=cds} went from %v to %v on endpoint-only changes", cds, got)
	}
}

// TestNameTableHosts: only EDS-only keys of headless hosts regenerate NDS.
func TestNameTableHosts(t *testing.T) {
	h := headlessHarness(t)
	push := h.s.PushContext()
	for _, tc := range []struct {
		host string
		want bool
	}{{dbHost, true}, {"a.default.svc.cluster.local", false}, {"gone.default.svc.cluster.local", false}} {
		req := model.NewPushRequest(false, model.ReasonEndpointUpdate, model.ConfigKey{Kind: model.KindEndpoints, Name: tc.host, Namespace: "default"})
		req.Push = push
		if got := len(nameTableHosts(req)) > 0; got != tc.want {
			t.Errorf("endpoints of %s regenerate NDS: %v, want %v", tc.host, got, tc.want)
		}
		// A sidecar has no EDS cluster of a headless host; a gRPC client may.
		sidecar := &Connection{proxy: &model.Proxy{}}
		grpcClient := &Connection{proxy: &model.Proxy{Metadata: model.NodeMetadata{Generator: model.GeneratorGRPC}}}
		if got := sidecar.typeAffected(model.NameTableType, req); got != tc.want {
			t.Errorf("endpoints of %s: sidecar NDS affected %v, want %v", tc.host, got, tc.want)
		}
		if got := sidecar.typeAffected(model.EndpointType, req); got == tc.want {
			t.Errorf("endpoints of %s: sidecar EDS affected %v, want %v", tc.host, got, !tc.want)
		}
		if !grpcClient.typeAffected(model.EndpointType, req) {
			t.Errorf("endpoints of %s: gRPC client's EDS not affected", tc.host)
		}
	}
}
