package xds

import (
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

func nodeIn(pod, ns string) *corev3.Node {
	n := testNode(pod, nil)
	n.Id = "sidecar~10.0.0.9~" + pod + "." + ns + "~" + ns + ".svc.cluster.local"
	return n
}

// subscribed opens a SotW stream in ns watching CDS and EDS (cluster a), ACKed.
func subscribed(h *harness, pod, ns string) *sotwClient {
	h.t.Helper()
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{Node: nodeIn(pod, ns), TypeUrl: model.ClusterType})
	c.send(ack(c.recvType(model.ClusterType)))
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	c.send(ack(c.recvType(model.EndpointType), clusterA))
	return c
}

// quiet checks c got nothing from the last push: after the round was
// enqueued and delivered, the next response answers c's own new request.
func quiet(h *harness, c *sotwClient, seq uint64) {
	h.t.Helper()
	eventually(h.t, "push round", func() bool { return h.s.PushSeq() > seq })
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA, clusterB}})
	if r := c.recvType(model.EndpointType); len(r.GetResources()) != 2 {
		h.t.Fatalf("got a push instead of the answer to the new subscription: %v", sotwNames(h.t, r))
	}
}

func TestPushReachesOnlyProxiesThatSeeTheChange(t *testing.T) {
	store := fakeStore{}
	h := newHarness(t, true, func(env *model.Environment, _ *GeneratorTable) { env.ConfigStore = store })
	inOther := subscribed(h, "p1", "other")
	inDefault := subscribed(h, "p2", "default")

	// A DestinationRule visible only in its own namespace.
	store[model.KindDestinationRule] = []model.Config{{
		Meta: model.Meta{Kind: model.KindDestinationRule, Name: "local", Namespace: "other"},
		Spec: &networking.DestinationRule{Host: "a.default.svc.cluster.local", ExportTo: []string{"."}},
	}}
	seq := h.s.PushSeq()
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: model.KindDestinationRule, Name: "local", Namespace: "other"}))
	// Its clusters change; its endpoint assignments do not, and SotW does
	// not resend a type the change left as it was.
	inOther.recvType(model.ClusterType)
	quiet(h, inDefault, seq)

	// A service exported only to "other": only that namespace hears of it.
	svc := service("c", 80)
	svc.ExportTo = []string{"other"}
	h.reg.set(service("a", 80), service("b", 80), svc)
	seq = h.s.PushSeq()
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonServiceUpdate, model.ConfigKey{Kind: model.KindService, Name: svc.Hostname, Namespace: "default"}))
	inOther.recvType(model.ClusterType)
	quiet(h, inDefault, seq)
}

func TestPushSendsOnlyAffectedTypes(t *testing.T) {
	store := fakeStore{}
	h := newHarness(t, true, func(env *model.Environment, _ *GeneratorTable) { env.ConfigStore = store })
	c := subscribed(h, "p1", "default")
	// A VirtualService changes routes only: no CDS or EDS push.
	store[model.KindVirtualService] = []model.Config{{
		Meta: model.Meta{Kind: model.KindVirtualService, Name: "vs", Namespace: "default"},
		Spec: &networking.VirtualService{Hosts: []string{"a"}},
	}}
	seq := h.s.PushSeq()
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: model.KindVirtualService, Name: "vs", Namespace: "default"}))
	quiet(h, c, seq)
}

func TestTypeAffectedTable(t *testing.T) {
	sidecar := &Connection{proxy: &model.Proxy{}}
	grpcClient := &Connection{proxy: &model.Proxy{Metadata: model.NodeMetadata{Generator: model.GeneratorGRPC}}}
	router := &Connection{proxy: &model.Proxy{Type: model.Router}}
	key := func(k model.Kind) *model.PushRequest {
		return model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: k, Name: "x", Namespace: "ns"})
	}
	all := []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType, model.SecretType}
	cases := []struct {
		name string
		c    *Connection
		req  *model.PushRequest
		want []string
	}{
		{"eds-only", sidecar, model.NewPushRequest(false, model.ReasonEndpointUpdate, model.ConfigKey{Kind: model.KindEndpoints, Name: "h"}), []string{model.EndpointType}},
		{"service", sidecar, key(model.KindService), []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType}},
		{"destination rule", sidecar, key(model.KindDestinationRule), []string{model.ClusterType, model.EndpointType}},
		// AUTO_PASSTHROUGH listeners have a chain per subset.
		{"destination rule, router", router, key(model.KindDestinationRule), []string{model.ClusterType, model.EndpointType, model.ListenerType}},
		{"virtual service", sidecar, key(model.KindVirtualService), []string{model.ListenerType, model.RouteType}},
		{"service entry", sidecar, key(model.KindServiceEntry), all},
		{"everything", sidecar, model.NewPushRequest(true, model.ReasonGlobalUpdate), all},
		{"grpc client", grpcClient, key(model.KindVirtualService), all},
	}
	for _, tc := range cases {
		var got []string
		for _, typ := range all {
			if tc.c.typeAffected(typ, tc.req) {
				got = append(got, typ)
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: types %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: types %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

// TestSecretChangeReachesGatewaysOfItsNamespace: a credential Secret change
// pushes SDS to the routers of the Secret's namespace and nobody else.
func TestSecretChangeReachesGatewaysOfItsNamespace(t *testing.T) {
	req := model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: model.KindSecret, Name: "bookinfo-cert", Namespace: "istio-system"})
	scope := newPushScope(req, nil)
	for _, tc := range []struct {
		proxy *model.Proxy
		want  bool
	}{
		{&model.Proxy{Type: model.Router, Namespace: "istio-system"}, true},
		{&model.Proxy{Type: model.Router, Namespace: "other"}, false},
		{&model.Proxy{Type: model.SidecarProxy, Namespace: "istio-system"}, false},
	} {
		c := &Connection{proxy: tc.proxy}
		if got := scope.affects(c); got != tc.want {
			t.Errorf("%s in %s: affected %v, want %v", tc.proxy.Type, tc.proxy.Namespace, got, tc.want)
		}
		if tc.want && (!c.typeAffected(model.SecretType, req) || c.typeAffected(model.ClusterType, req)) {
			t.Errorf("a Secret change must regenerate SDS only")
		}
	}
}

// TestSecretChangeReachesCrossNamespaceWatchers: a router of another
// namespace is pushed for a Secret change only when it has a verified
// identity and watches a credential of the Secret's namespace
// (kubernetes://NS/NAME, or a Gateway API certificateRef
// kubernetes-gateway://NS/NAME).
func TestSecretChangeReachesCrossNamespaceWatchers(t *testing.T) {
	req := model.NewPushRequest(true, model.ReasonSecretTrigger, model.ConfigKey{Kind: model.KindSecret, Name: "shared", Namespace: "certs"})
	scope := newPushScope(req, nil)
	id := &model.VerifiedIdentity{SPIFFE: "spiffe://cluster.local/ns/gw/sa/ingress", Namespace: "gw", ServiceAccount: "ingress"}
	conn := func(verified *model.VerifiedIdentity, names ...string) *Connection {
		ws := newWatch(model.SecretType)
		for _, n := range names {
			ws.watched.ResourceNames[n] = struct{}{}
		}
		return &Connection{
			proxy:   &model.Proxy{Type: model.Router, Namespace: "gw", VerifiedIdentity: verified},
			watches: map[string]*watchState{model.SecretType: ws},
		}
	}
	for _, tc := range []struct {
		name string
		c    *Connection
		want bool
	}{
		{"verified, watching certs/shared", conn(id, "kubernetes://gw-cert", "kubernetes://certs/shared"), true},
		{"verified, watching certs/other", conn(id, "kubernetes://certs/other"), true},
		{"verified, watching its own namespace only", conn(id, "kubernetes://gw-cert", "kubernetes://gw/x"), false},
		{"unverified, watching certs/shared", conn(nil, "kubernetes://certs/shared"), false},
		{"verified, watching certificateRef certs/shared", conn(id, "kubernetes-gateway://certs/shared"), true},
		{"verified, watching certificateRef gw/x", conn(id, "kubernetes-gateway://gw/x"), false},
		{"unverified, watching certificateRef certs/shared", conn(nil, "kubernetes-gateway://certs/shared"), false},
		{"verified, no SDS watch", &Connection{proxy: &model.Proxy{Type: model.Router, Namespace: "gw", VerifiedIdentity: id}}, false},
	} {
		if got := scope.affects(tc.c); got != tc.want {
			t.Errorf("%s: affected %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestWasmPluginPushes: a WasmPlugin change reaches every proxy (plugins
// select by labels, not visibility) and regenerates LDS and ECDS only; a
// Secret change reaches an authenticated sidecar watching the ECDS
// resource of a plugin of the Secret's namespace (its pull secret), and
// regenerates SDS and ECDS.
func TestWasmPluginPushes(t *testing.T) {
	types := []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType, model.SecretType, model.ExtensionConfigType}
	affected := func(c *Connection, req *model.PushRequest) []string {
		var out []string
		for _, typ := range types {
			if c.typeAffected(typ, req) {
				out = append(out, typ)
			}
		}
		return out
	}
	plugin := model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: model.KindWasmPlugin, Name: "p", Namespace: "ns"})
	sidecar := &Connection{proxy: &model.Proxy{Namespace: "other"}}
	if !newPushScope(plugin, nil).affects(sidecar) {
		t.Error("a WasmPlugin change did not reach a sidecar")
	}
	if got := affected(sidecar, plugin); !slices.Equal(got, []string{model.ListenerType, model.ExtensionConfigType}) {
		t.Errorf("WasmPlugin change regenerates %v", got)
	}

	secret := model.NewPushRequest(true, model.ReasonSecretTrigger, model.ConfigKey{Kind: model.KindSecret, Name: "pull", Namespace: "ns"})
	scope := newPushScope(secret, nil)
	id := &model.VerifiedIdentity{SPIFFE: "spiffe://cluster.local/ns/ns/sa/app", Namespace: "ns", ServiceAccount: "app"}
	conn := func(verified *model.VerifiedIdentity, names ...string) *Connection {
		ws := newWatch(model.ExtensionConfigType)
		for _, n := range names {
			ws.watched.ResourceNames[n] = struct{}{}
		}
		return &Connection{proxy: &model.Proxy{Namespace: "ns", VerifiedIdentity: verified},
			watches: map[string]*watchState{model.ExtensionConfigType: ws}}
	}
	for _, tc := range []struct {
		name string
		c    *Connection
		want bool
	}{
		{"verified, plugin of ns", conn(id, model.WasmPluginResourcePrefix+"ns.p"), true},
		{"verified, plugin of another namespace", conn(id, model.WasmPluginResourcePrefix+"other.p"), false},
		{"unverified, plugin of ns", conn(nil, model.WasmPluginResourcePrefix+"ns.p"), false},
	} {
		if got := scope.affects(tc.c); got != tc.want {
			t.Errorf("%s: affected %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := affected(sidecar, secret); !slices.Equal(got, []string{model.SecretType, model.ExtensionConfigType}) {
		t.Errorf("Secret change regenerates %v", got)
	}
}
