package xds

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/redact"
	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// testKey is the private key sdsGen serves: it must never show in a debug answer.
const testKey = "-----BEGIN PRIVATE KEY-----\nMEEC-test-only-key-material-0123456789\n-----END PRIVATE KEY-----\n"

// ldsGen makes one TCP listener per service port.
type ldsGen struct{}

func (ldsGen) Generate(_ *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	var out model.Resources
	for _, svc := range push.Services() {
		for _, p := range svc.Ports {
			name := fmt.Sprintf("0.0.0.0_%d_%s", p.Port, svc.Name)
			l := &listenerv3.Listener{Name: name, Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: p.Port},
			}}}}
			out = append(out, &discovery.Resource{Name: name, Resource: mustAny(l)})
		}
	}
	return out, nil
}

// sdsGen serves every subscribed name as a certificate with testKey.
type sdsGen struct{}

func (sdsGen) Generate(_ *model.Proxy, _ *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	var out model.Resources
	for _, n := range slices.Sorted(w.All()) {
		sec := &tlsv3.Secret{Name: n, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte("CERT-" + n)}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte(testKey)}},
		}}}
		out = append(out, &discovery.Resource{Name: n, Resource: mustAny(sec)})
	}
	return out, nil
}

func withIstioctlGens(_ *model.Environment, g *GeneratorTable) {
	g.Sidecar[model.ListenerType] = ldsGen{}
	g.Sidecar[model.SecretType] = sdsGen{}
}

// istioctlNode is the node istioctl sends: Istio's pkg/adsc defaults for the
// ID, and the metadata istioctl/pkg/xds GetXdsResponse sets (adsc adds
// ISTIO_VERSION 65536.65536.65536 when the caller sets none).
func istioctlNode(t *testing.T) *corev3.Node {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{
		"GENERATOR": "event", "SERVICE_ACCOUNT": "default", "NAMESPACE": "istio-system", "ISTIO_VERSION": "65536.65536.65536",
	})
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: "sidecar~10.0.0.99~test-1.default~default.svc.cluster.local", Metadata: md}
}

// istioctlStream is one stream opened as istioctl opens it.
type istioctlStream struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	sent   bool
}

func newIstioctlStream(t *testing.T, conn grpc.ClientConnInterface) *istioctlStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &istioctlStream{t: t, stream: stream}
}

// ask sends a request as Istio's adsc Send does (the node on the first
// request only, response_nonce set to the time) and returns the answer.
func (s *istioctlStream) ask(typeURL string, names ...string) (*discovery.DiscoveryResponse, error) {
	s.t.Helper()
	req := &discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names, ResponseNonce: time.Now().String()}
	if !s.sent {
		req.Node, s.sent = istioctlNode(s.t), true
	}
	if err := s.stream.Send(req); err != nil {
		return nil, err
	}
	return s.stream.Recv()
}

// cpInfo decodes the control_plane identifier as istioctl's multixds.CpInfo does.
type cpInfo struct {
	Component string
	ID        string
	Info      struct {
		Version string `json:"version"`
	}
}

func decodeCP(t *testing.T, r interface{ GetControlPlane() *corev3.ControlPlane }) cpInfo {
	t.Helper()
	var cp cpInfo
	if r.GetControlPlane() == nil {
		t.Fatal("response without control_plane")
	}
	if err := json.Unmarshal([]byte(r.GetControlPlane().GetIdentifier()), &cp); err != nil {
		t.Fatalf("control_plane identifier %q: %v", r.GetControlPlane().GetIdentifier(), err)
	}
	if cp.Component != "istiod" || cp.ID != "meshpilot-0" || cp.Info.Version != version.Version {
		t.Fatalf("control_plane = %+v, want istiod meshpilot-0 %s", cp, version.Version)
	}
	return cp
}

// meshOf starts three real proxies on the harness: pa (SotW, adsc: CDS,
// EDS, LDS, all ACKed), pb (Delta, adsc: CDS, EDS) and pc (raw SotW: CDS
// not answered, SDS ACKed, LDS NACKed), and waits until the server has
// recorded every answer.
func meshOf(t *testing.T, h *harness) (pa, pb *adsc.Client, pc *sotwClient) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	md := func(pod string) *corev3.Node {
		return testNode(pod, map[string]any{"ISTIO_VERSION": "1.31.1", "CLUSTER_ID": "Kubernetes", "NAMESPACE": "default"})
	}
	pa = adsc.New(adsc.Config{Node: md("pa"), Types: []string{model.ClusterType, model.EndpointType, model.ListenerType}})
	pb = adsc.New(adsc.Config{Node: md("pb"), Delta: true, Types: []string{model.ClusterType, model.EndpointType}})
	for _, c := range []*adsc.Client{pa, pb} {
		go func() { _ = c.Run(ctx, h.conn) }()
	}
	pc = h.sotw()
	pc.send(&discovery.DiscoveryRequest{Node: md("pc"), TypeUrl: model.ClusterType})
	pc.recvType(model.ClusterType)
	pc.send(&discovery.DiscoveryRequest{TypeUrl: model.SecretType, ResourceNames: []string{"default"}})
	pc.send(ack(pc.recvType(model.SecretType), "default"))
	pc.send(&discovery.DiscoveryRequest{TypeUrl: model.ListenerType})
	r := pc.recvType(model.ListenerType)
	pc.send(&discovery.DiscoveryRequest{TypeUrl: model.ListenerType, ResponseNonce: r.GetNonce(), ErrorDetail: status.New(codes.InvalidArgument, "bad listener").Proto()})
	eventually(t, "three proxies with every answer recorded", func() bool {
		st := h.s.IstioSyncz("")
		if len(st) != 3 {
			return false
		}
		a, b, c := st[0], st[1], st[2]
		return a.ClusterAcked != "" && a.ClusterAcked == a.ClusterSent && a.EndpointAcked == a.EndpointSent && a.EndpointSent != "" &&
			a.ListenerAcked != "" && a.ListenerAcked == a.ListenerSent &&
			b.ClusterAcked != "" && b.ClusterAcked == b.ClusterSent && b.EndpointSent != "" && b.EndpointAcked == b.EndpointSent &&
			c.Resources[model.ListenerType].LastError != "" && c.Resources[model.SecretType].Acked != ""
	})
	return pa, pb, pc
}

func newIstioctlHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, true, func(o *Options) { o.InstanceID, o.SystemNamespace = "meshpilot-0", "istio-system" }, withIstioctlGens)
}

// xdsClientsGauge sums pilot_xds over its version labels.
func xdsClientsGauge(t *testing.T, h *harness) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	h.metrics.XDSClients.Collect(ch)
	close(ch)
	sum := 0.0
	for m := range ch {
		sum += value(t, m)
	}
	return sum
}

// TestIstioctlProxyStatusOverADS speaks istioctl proxy-status's protocol
// (istio.io/debug/syncz, istioctl's node and nonce) next to three real
// proxies and checks every field istioctl reads: the ClientConfig type, its
// node ID and the CLUSTER_ID and ISTIO_VERSION metadata, each type's
// generic_xds_config type_url and config_status (and the deprecated
// per-type xds_config of older istioctl), and the control plane's ID and
// version. The debug stream is no proxy: syncz leaves it out, pilot_xds
// does not count it, and a push round sends it nothing.
func TestIstioctlProxyStatusOverADS(t *testing.T) {
	h := newIstioctlHarness(t)
	pa, _, _ := meshOf(t, h)
	ds := newIstioctlStream(t, h.conn)
	r, err := ds.ask(TypeDebugSyncz)
	if err != nil {
		t.Fatal(err)
	}
	decodeCP(t, r)
	if r.GetTypeUrl() != TypeDebugSyncz || len(r.GetResources()) != 3 {
		t.Fatalf("syncz: type %s, %d resources, want 3 (the debug stream is no proxy)", r.GetTypeUrl(), len(r.GetResources()))
	}
	S := statusv3.ConfigStatus_SYNCED
	N, E, T := statusv3.ConfigStatus_NOT_SENT, statusv3.ConfigStatus_ERROR, statusv3.ConfigStatus_STALE
	want := map[string]map[string]statusv3.ConfigStatus{
		"pa": {model.ClusterType: S, model.ListenerType: S, model.RouteType: N, model.EndpointType: S, model.ExtensionConfigType: N},
		"pb": {model.ClusterType: S, model.ListenerType: N, model.RouteType: N, model.EndpointType: S, model.ExtensionConfigType: N},
		"pc": {model.ClusterType: T, model.ListenerType: E, model.RouteType: N, model.EndpointType: N, model.ExtensionConfigType: N},
	}
	for i, pod := range []string{"pa", "pb", "pc"} {
		a := r.GetResources()[i]
		if a.GetTypeUrl() != "type.googleapis.com/envoy.service.status.v3.ClientConfig" {
			t.Fatalf("resource type %s", a.GetTypeUrl())
		}
		cc := &statusv3.ClientConfig{}
		if err := a.UnmarshalTo(cc); err != nil {
			t.Fatal(err)
		}
		if err := cc.ValidateAll(); err != nil {
			t.Fatal(err)
		}
		if cc.GetNode().GetId() != testNode(pod, nil).GetId() {
			t.Fatalf("resource %d node %q, want %s's", i, cc.GetNode().GetId(), pod)
		}
		md := cc.GetNode().GetMetadata().GetFields()
		if md["CLUSTER_ID"].GetStringValue() != "Kubernetes" || md["ISTIO_VERSION"].GetStringValue() != "1.31.1" || md["NAMESPACE"].GetStringValue() != "default" {
			t.Fatalf("%s node metadata = %v", pod, cc.GetNode().GetMetadata())
		}
		got := map[string]statusv3.ConfigStatus{}
		for _, g := range cc.GetGenericXdsConfigs() {
			got[g.GetTypeUrl()] = g.GetConfigStatus()
		}
		if fmt.Sprint(got) != fmt.Sprint(want[pod]) {
			t.Errorf("%s generic_xds_configs = %v, want %v", pod, got, want[pod])
		}
		old := map[string]statusv3.ConfigStatus{}
		for _, x := range cc.GetXdsConfig() { //nolint:staticcheck // older istioctl reads it
			switch x.GetPerXdsConfig().(type) {
			case *statusv3.PerXdsConfig_ClusterConfig:
				old[model.ClusterType] = x.GetStatus()
			case *statusv3.PerXdsConfig_ListenerConfig:
				old[model.ListenerType] = x.GetStatus()
			case *statusv3.PerXdsConfig_RouteConfig:
				old[model.RouteType] = x.GetStatus()
			case *statusv3.PerXdsConfig_EndpointConfig:
				old[model.EndpointType] = x.GetStatus()
			}
		}
		if len(old) != 4 || old[model.ClusterType] != want[pod][model.ClusterType] || old[model.ListenerType] != want[pod][model.ListenerType] ||
			old[model.EndpointType] != want[pod][model.EndpointType] {
			t.Errorf("%s xds_config = %v", pod, old)
		}
	}
	if n := xdsClientsGauge(t, h); n != 3 {
		t.Errorf("pilot_xds = %v with the debug stream open, want 3", n)
	}
	if n := len(h.s.SyncStatus()); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}

	// A push round reaches the proxies, not the debug stream: the next
	// message on it is the answer to its next request.
	seq := h.s.PushSeq()
	h.reg.set(service("a", 80), service("b", 80), service("c", 80))
	h.fullPush()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := pa.WaitFor(ctx, func(c *adsc.Client) bool { return len(c.Resources(model.ClusterType)) == 3 }); err != nil {
		t.Fatal(err)
	}
	// PushSeq counts the round once it has been enqueued everywhere,
	// which may be just after pa received it.
	eventually(t, "the push round counted", func() bool { return h.s.PushSeq() > seq })
	r2, err := ds.ask(TypeDebugSyncz)
	if err != nil || r2.GetTypeUrl() != TypeDebugSyncz {
		t.Fatalf("after a push the debug stream got %s, %v; want only its syncz answer", r2.GetTypeUrl(), err)
	}
	// An ACK of a debug answer is not answered: the next message is the
	// answer to the request after it.
	if err := ds.stream.Send(&discovery.DiscoveryRequest{TypeUrl: TypeDebugSyncz, ResponseNonce: r2.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	r3, err := ds.ask(TypeDebug, "list")
	if err != nil || r3.GetTypeUrl() != TypeDebug {
		t.Fatalf("after an ACK: %s, %v; want the istio.io/debug answer", r3.GetTypeUrl(), err)
	}
}

// configDumpSections unpacks the sections of a config dump answer.
func configDumpSections(t *testing.T, r *discovery.DiscoveryResponse) (*adminv3.ClustersConfigDump, *adminv3.ListenersConfigDump, *adminv3.SecretsConfigDump) {
	t.Helper()
	c, l, s := &adminv3.ClustersConfigDump{}, &adminv3.ListenersConfigDump{}, &adminv3.SecretsConfigDump{}
	n := 0
	for _, a := range r.GetResources() {
		for _, m := range []interface {
			ProtoReflect() protoreflect.Message
		}{c, l, s} {
			if a.MessageIs(m.(proto.Message)) {
				n++
				if err := a.UnmarshalTo(m.(proto.Message)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if n != 3 {
		t.Fatalf("config dump has %d of the clusters, listeners and secrets sections", n)
	}
	return c, l, s
}

// TestIstioctlConfigDumpOverADS: istio.io/debug/config_dump named by
// istioctl's proxy ID (POD.NAMESPACE) answers with the sections of an
// Envoy ConfigDump (bootstrap, clusters, listeners, scoped routes, routes,
// secrets, ECDS), every resource valid, secrets redacted; a proxy connected
// elsewhere gets an empty answer (istioctl then asks the next replica); a
// malformed request ends that stream only.
func TestIstioctlConfigDumpOverADS(t *testing.T) {
	h := newIstioctlHarness(t)
	meshOf(t, h)
	ds := newIstioctlStream(t, h.conn)
	r, err := ds.ask(TypeDebugConfigDump, "pa.default")
	if err != nil {
		t.Fatal(err)
	}
	decodeCP(t, r)
	if len(r.GetResources()) != 7 {
		t.Fatalf("config dump of pa: %d sections, want 7", len(r.GetResources()))
	}
	validate(t, r.GetResources())
	clusters, listeners, _ := configDumpSections(t, r)
	if len(clusters.GetDynamicActiveClusters()) != 2 || len(listeners.GetDynamicListeners()) != 2 ||
		listeners.GetDynamicListeners()[0].GetActiveState().GetListener() == nil || clusters.GetVersionInfo() != h.s.PushContext().Version {
		t.Fatalf("pa: clusters %v, listeners %v", clusters, listeners)
	}

	r, err = ds.ask(TypeDebugConfigDump, "pc.default")
	if err != nil {
		t.Fatal(err)
	}
	validate(t, r.GetResources())
	_, _, secrets := configDumpSections(t, r)
	if len(secrets.GetDynamicActiveSecrets()) != 1 || secrets.GetDynamicActiveSecrets()[0].GetName() != "default" {
		t.Fatalf("pc secrets = %v", secrets)
	}
	sec := &tlsv3.Secret{}
	if err := secrets.GetDynamicActiveSecrets()[0].GetSecret().UnmarshalTo(sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.GetTlsCertificate().GetPrivateKey().GetInlineBytes()) != redact.Redacted ||
		string(sec.GetTlsCertificate().GetCertificateChain().GetInlineBytes()) != "CERT-default" {
		t.Fatalf("secret not redacted as Envoy does: %v", sec)
	}
	if b, _ := proto.Marshal(r); strings.Contains(string(b), "test-only-key-material") {
		t.Fatal("the config dump answer carries the private key")
	}

	r, err = ds.ask(TypeDebugConfigDump, "nobody.default")
	if err != nil || len(r.GetResources()) != 0 {
		t.Fatalf("config dump of an unknown proxy: %d resources, %v; want an empty answer", len(r.GetResources()), err)
	}

	bad := newIstioctlStream(t, h.conn)
	if _, err := bad.ask(TypeDebugConfigDump); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "resource_names") {
		t.Fatalf("config dump without a proxy ID: %v, want InvalidArgument naming resource_names", err)
	}
	if _, err := ds.ask(TypeDebugSyncz); err != nil {
		t.Fatalf("another debug stream broke this one: %v", err)
	}
}

// TestIstioctlInternalDebugOverADS: istio.io/debug runs the debug handler
// its resource name names (istioctl x internal-debug) and answers with its
// body in one Any of type istio.io/debug; force_disconnect is not reachable
// this way; a request of another type on a debug stream ends it; Delta
// streams do not serve debug types.
func TestIstioctlInternalDebugOverADS(t *testing.T) {
	h := newIstioctlHarness(t)
	meshOf(t, h)
	ds := newIstioctlStream(t, h.conn)
	body := func(name string) []byte {
		t.Helper()
		r, err := ds.ask(TypeDebug, name)
		if err != nil {
			t.Fatal(err)
		}
		decodeCP(t, r)
		if len(r.GetResources()) != 1 || r.GetResources()[0].GetTypeUrl() != TypeDebug {
			t.Fatalf("%s: %d resources", name, len(r.GetResources()))
		}
		return r.GetResources()[0].GetValue()
	}
	var syncz []map[string]any
	if err := json.Unmarshal(body("syncz"), &syncz); err != nil || len(syncz) != 3 {
		t.Fatalf("syncz: %v, %d entries", err, len(syncz))
	}
	pa := syncz[0]
	for _, k := range []string{"cluster_id", "proxy", "proxy_type", "istio_version", "cluster_sent", "cluster_acked", "listener_sent", "listener_acked", "endpoint_sent", "endpoint_acked"} {
		if s, _ := pa[k].(string); s == "" {
			t.Errorf("syncz entry of pa lacks %s: %v", k, pa)
		}
	}
	if pa["proxy"] != testNode("pa", nil).GetId() || pa["proxy_type"] != "sidecar" || pa["cluster_sent"] != pa["cluster_acked"] || pa["istio_version"] != "1.31.1" {
		t.Errorf("syncz entry of pa = %v", pa)
	}
	dump := &adminv3.ConfigDump{}
	b := body("config_dump?proxyID=pc.default")
	if err := protojson.Unmarshal(b, dump); err != nil || len(dump.GetConfigs()) != 7 || strings.Contains(string(b), "test-only-key-material") {
		t.Fatalf("config_dump: %v, %d sections", err, len(dump.GetConfigs()))
	}
	var ads AdsClients
	if err := json.Unmarshal(body("adsz"), &ads); err != nil || ads.Total != 3 {
		t.Fatalf("adsz: %v, %+v", err, ads)
	}
	var list []string
	if err := json.Unmarshal(body("list"), &list); err != nil || !strings.Contains(strings.Join(list, " "), "config_dump") {
		t.Fatalf("list: %v, %v", err, list)
	}
	if got := string(body("force_disconnect?proxyID=pa.default")); !strings.Contains(got, "404") {
		t.Fatalf("force_disconnect over ADS answered %q, want not found", got)
	}
	if n := len(h.s.SyncStatus()); n != 3 {
		t.Fatalf("%d connections after force_disconnect over ADS, want 3", n)
	}
	long := newIstioctlStream(t, h.conn)
	if _, err := long.ask(TypeDebug, strings.Repeat("x", maxDebugName+1)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "resource_names") {
		t.Fatalf("an oversized debug name: %v, want InvalidArgument naming resource_names", err)
	}
	if _, err := ds.ask(model.ClusterType); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CDS on a debug stream: %v, want InvalidArgument", err)
	}
	dc := h.delta()
	dc.send(&discovery.DeltaDiscoveryRequest{Node: istioctlNode(t), TypeUrl: TypeDebugSyncz})
	var derr error
	select {
	case derr = <-dc.errc:
	case r := <-dc.resps:
		t.Fatalf("Delta debug stream answered %s", r.GetTypeUrl())
	case <-time.After(waitTimeout):
		t.Fatal("Delta debug stream not ended")
	}
	if err := derr; status.Code(err) != codes.Unimplemented {
		t.Fatalf("Delta debug stream: %v, want Unimplemented", err)
	}
}

// TestControlPlaneOnEveryResponse: ordinary CDS and LDS responses, SotW and
// Delta, carry the control plane identifier istioctl decodes.
func TestControlPlaneOnEveryResponse(t *testing.T) {
	h := newIstioctlHarness(t)
	c, r := initialCDS(h, "cp")
	decodeCP(t, r)
	c.send(ack(r))
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.ListenerType})
	decodeCP(t, c.recvType(model.ListenerType))
	d := h.delta()
	d.send(&discovery.DeltaDiscoveryRequest{Node: testNode("cpd", nil), TypeUrl: model.ClusterType})
	decodeCP(t, d.recv(model.ClusterType))
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: model.ListenerType})
	decodeCP(t, d.recv(model.ListenerType))
}

// TestDebugAccessRule: who may use which debug type on the secure port.
func TestDebugAccessRule(t *testing.T) {
	h := newIstioctlHarness(t)
	meshOf(t, h)
	id := func(ns string) *model.VerifiedIdentity {
		return &model.VerifiedIdentity{SPIFFE: "spiffe://cluster.local/ns/" + ns + "/sa/default", Namespace: ns, ServiceAccount: "default"}
	}
	for _, tc := range []struct {
		caller  *model.VerifiedIdentity
		typeURL string
		names   []string
		allowed bool
	}{
		{nil, TypeDebugSyncz, nil, true},
		{id("istio-system"), TypeDebugSyncz, nil, true},
		{id("istio-system"), TypeDebug, []string{"adsz"}, true},
		{id("default"), TypeDebugSyncz, nil, false},
		{id("default"), TypeDebug, []string{"adsz"}, false},
		{id("default"), TypeDebugConfigDump, []string{"pa.default"}, true},
		{id("default"), TypeDebug, []string{"config_dump?proxyID=pa.default"}, true},
		{id("other"), TypeDebugConfigDump, []string{"pa.default"}, false},
		{id("other"), TypeDebug, []string{"config_dump?proxyID=pa.default"}, false},
		{id("other"), TypeDebugConfigDump, []string{"nobody.other"}, false},
	} {
		err := h.s.authorizeDebug(tc.caller, tc.typeURL, tc.names)
		if (err == nil) != tc.allowed || (err != nil && status.Code(err) != codes.PermissionDenied) {
			t.Errorf("%v %s %v: %v, want allowed=%v", tc.caller, tc.typeURL, tc.names, err, tc.allowed)
		}
	}
}
