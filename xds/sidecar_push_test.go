package xds

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// lockedStore is a ConfigStore a test changes while the server reads it.
type lockedStore struct {
	mu      sync.Mutex
	configs map[model.Kind][]model.Config
}

func (s *lockedStore) List(kind model.Kind) []model.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.configs[kind]
}

func (s *lockedStore) set(kind model.Kind, configs ...model.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.configs[kind] = configs
}

// pushMarkGen makes one listener named after the PushContext it was built
// from, so every push of LDS to a proxy shows on its stream, whatever the
// proxy's scope: it tells which push a response belongs to.
type pushMarkGen struct{}

func (pushMarkGen) Generate(_ *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	l := &listenerv3.Listener{Name: "push-" + push.Version, Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
		SocketAddress: &corev3.SocketAddress{Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 1}},
	}}}
	return model.Resources{{Name: l.Name, Resource: mustAny(l)}}, nil
}

func reviewsSidecar(hosts ...string) model.Config {
	return model.Config{
		Meta: model.Meta{Kind: model.KindSidecar, Name: "reviews", Namespace: "default", Generation: int64(len(hosts))},
		Spec: &networking.Sidecar{
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "reviews"}},
			Egress:           []*networking.IstioEgressListener{{Hosts: hosts}},
		},
	}
}

// scopedProxy is one SotW stream subscribed to CDS (the real cluster
// generator) and LDS (pushMarkGen), both ACKed.
type scopedProxy struct {
	*sotwClient
	clusters []string
	mark     string
}

func connectScoped(h *harness, ip, pod, ns string, labels map[string]any) *scopedProxy {
	h.t.Helper()
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "LABELS": labels, "ISTIO_VERSION": "1.31.1"})
	if err != nil {
		h.t.Fatal(err)
	}
	node := &corev3.Node{Id: "sidecar~" + ip + "~" + pod + "." + ns + "~" + ns + ".svc.cluster.local", Metadata: md}
	p := &scopedProxy{sotwClient: h.sotw()}
	p.send(&discovery.DiscoveryRequest{Node: node, TypeUrl: model.ClusterType})
	r := p.recvType(model.ClusterType)
	p.clusters = clusterNames(h.t, r)
	p.send(ack(r))
	p.send(&discovery.DiscoveryRequest{TypeUrl: model.ListenerType})
	r = p.recvType(model.ListenerType)
	p.mark = listenerNames(h.t, r)[0]
	p.send(ack(r))
	return p
}

// nextPush reads the responses of one push (CDS when it changed, then
// LDS, which changes on every push), ACKs them and returns the push mark.
func (p *scopedProxy) nextPush() string {
	p.t.Helper()
	for {
		r := p.recv()
		p.send(ack(r))
		switch r.GetTypeUrl() {
		case model.ClusterType:
			p.clusters = clusterNames(p.t, r)
		case model.ListenerType:
			p.mark = listenerNames(p.t, r)[0]
			return p.mark
		default:
			p.t.Fatalf("unexpected response type %s", r.GetTypeUrl())
		}
	}
}

func clusterNames(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c.GetName())
	}
	slices.Sort(out)
	return out
}

func listenerNames(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		var l listenerv3.Listener
		if err := a.UnmarshalTo(&l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l.GetName())
	}
	if len(out) != 1 {
		t.Fatalf("want one marker listener, got %v", out)
	}
	return out
}

func hasCluster(clusters []string, host string) bool {
	return slices.ContainsFunc(clusters, func(n string) bool { return strings.HasSuffix(n, "|"+host) })
}

// TestSidecarScopesPushes proves by ordering that a change outside a
// proxy's Sidecar scope sends it nothing: after an out-of-scope change has
// reached a proxy that sees it, the next push reviews-v1 receives is the
// one of a later in-scope change (a push in between would come first on
// its stream, which delivers pushes in order).
func TestSidecarScopesPushes(t *testing.T) {
	const inventory = "inventory.prod.svc.cluster.local"
	const reviewsHost = "reviews.default.svc.cluster.local"
	in := nt.Bookinfo(t)
	prodSvc := nt.KubeService("inventory", "prod", "10.96.9.9", model.Port{Name: "http", Port: 8080})
	store := &lockedStore{configs: map[model.Kind][]model.Config{}}
	store.set(model.KindSidecar, reviewsSidecar("./*"))
	h := newHarness(t, false, func(env *model.Environment, gens *GeneratorTable) {
		env.ConfigStore = store
		env.Endpoints = in.Environment().Endpoints
		gens.Sidecar = map[string]model.Generator{model.ClusterType: cluster.Generator{}, model.ListenerType: pushMarkGen{}}
	})
	h.reg.set(append(slices.Clone(in.Services), prodSvc)...)
	h.s.MarkReady()

	reviews := connectScoped(h, nt.BookinfoPods["reviews-v1"], "reviews-v1-pod", "default", map[string]any{"app": "reviews", "version": "v1"})
	productpage := connectScoped(h, nt.BookinfoPods["productpage-v1"], "productpage-v1-pod", "default", map[string]any{"app": "productpage", "version": "v1"})
	staging := connectScoped(h, "10.244.9.10", "client", "staging", nil)
	if hasCluster(reviews.clusters, inventory) || !hasCluster(reviews.clusters, reviewsHost) {
		t.Fatalf("reviews-v1 under Sidecar ./* has clusters %v", reviews.clusters)
	}
	if !hasCluster(staging.clusters, inventory) || !hasCluster(productpage.clusters, inventory) {
		t.Fatal("proxies without a Sidecar must see inventory.prod")
	}
	setServices := func(extra ...*model.Service) {
		svcs := slices.Clone(in.Services)
		for i, s := range svcs {
			for _, e := range extra {
				if e.Hostname == s.Hostname {
					svcs[i] = e
				}
			}
		}
		for _, e := range extra {
			if e.Namespace == "prod" {
				prodSvc = e
			}
		}
		h.reg.set(append(svcs, prodSvc)...)
	}
	serviceChanged := func(hostname, ns string) {
		h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonServiceUpdate, model.ConfigKey{Kind: model.KindService, Name: hostname, Namespace: ns}))
	}

	// 1. Out of scope: inventory.prod gains a port. Staging hears of it.
	bigger := nt.KubeService("inventory", "prod", "10.96.9.9", model.Port{Name: "http", Port: 8080}, model.Port{Name: "http-admin", Port: 8081})
	setServices(bigger)
	serviceChanged(inventory, "prod")
	outOfScope := staging.nextPush()
	if !slices.Contains(staging.clusters, "outbound|8081||"+inventory) {
		t.Fatalf("staging did not get the new inventory port: %v", staging.clusters)
	}
	// productpage, in reviews' namespace but not selected by its Sidecar, sees it too.
	if m := productpage.nextPush(); m != outOfScope || !slices.Contains(productpage.clusters, "outbound|8081||"+inventory) {
		t.Fatalf("productpage (no Sidecar) got push %s with clusters %v, want push %s with the inventory change", m, productpage.clusters, outOfScope)
	}

	// 2. In scope: reviews gains a port. Reviews' next push must be this one.
	var reviewsSvc *model.Service
	for _, s := range in.Services {
		if s.Hostname == reviewsHost {
			reviewsSvc = nt.KubeService("reviews", "default", s.Address, append(slices.Clone(s.Ports), model.Port{Name: "http-extra", Port: 9081})...)
		}
	}
	setServices(reviewsSvc)
	serviceChanged(reviewsHost, "default")
	got := reviews.nextPush()
	if got == outOfScope {
		t.Fatalf("reviews-v1 was pushed for the out-of-scope change to %s (push %s)", inventory, outOfScope)
	}
	if got != staging.nextPush() || got != productpage.nextPush() {
		t.Fatal("the in-scope change reached reviews-v1 in another push than the other proxies")
	}
	if !slices.Contains(reviews.clusters, "outbound|9081||"+reviewsHost) || hasCluster(reviews.clusters, inventory) {
		t.Fatalf("reviews-v1 clusters after the in-scope change: %v", reviews.clusters)
	}

	// 3. The Sidecar widens to everything: only the proxy it selects is
	// pushed; then a change everyone sees shows the others skipped it.
	store.set(model.KindSidecar, reviewsSidecar("*/*", "./*"))
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: model.KindSidecar, Name: "reviews", Namespace: "default"}))
	sidecarPush := reviews.nextPush()
	if !hasCluster(reviews.clusters, inventory) {
		t.Fatalf("reviews-v1 under Sidecar */* lacks inventory: %v", reviews.clusters)
	}
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonGlobalUpdate))
	everyone := reviews.nextPush()
	for name, p := range map[string]*scopedProxy{"staging": staging, "productpage": productpage} {
		if m := p.nextPush(); m == sidecarPush || m != everyone {
			t.Fatalf("%s: next push %s, want %s (the Sidecar change %s must not reach it)", name, m, everyone, sidecarPush)
		}
	}
}

func TestPushScopeUnderSidecars(t *testing.T) {
	const inventory = "inventory.prod.svc.cluster.local"
	build := func(sidecars ...model.Config) *model.PushContext {
		in := nt.Bookinfo(t)
		in.Services = append(in.Services, nt.KubeService("inventory", "prod", "10.96.9.9", model.Port{Name: "http", Port: 8080}))
		in.Configs = append(in.Configs, sidecars...)
		return in.PushContext()
	}
	root := model.Config{
		Meta: model.Meta{Kind: model.KindSidecar, Name: "default", Namespace: "istio-system"},
		Spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*", "istio-system/*"}}}},
	}
	withBoth := build(reviewsSidecar("./*"), root)
	withRoot := build(root)
	conn := func(p *model.Proxy) *Connection { return &Connection{proxy: p} }
	reviews, productpage := conn(nt.BookinfoProxy("reviews-v1")), conn(nt.BookinfoProxy("productpage-v1"))
	staging, prod := conn(nt.Proxy("10.244.9.10", "client", "staging", nil)), conn(nt.Proxy("10.244.9.11", "inv", "prod", nil))
	key := func(kind model.Kind, ns, name string) model.ConfigKey {
		return model.ConfigKey{Kind: kind, Namespace: ns, Name: name}
	}
	svcKey := key(model.KindService, "prod", inventory)
	cases := []struct {
		name       string
		prev, next *model.PushContext
		keys       []model.ConfigKey
		want       map[*Connection]bool
	}{
		{"service outside every scope but prod's", withBoth, withBoth, []model.ConfigKey{svcKey},
			map[*Connection]bool{reviews: false, productpage: false, staging: false, prod: true}},
		{"service inside reviews' scope", withBoth, withBoth, []model.ConfigKey{key(model.KindService, "default", "details.default.svc.cluster.local")},
			map[*Connection]bool{reviews: true, productpage: true, staging: false, prod: false}},
		{"endpoints with a full push", withBoth, withBoth, []model.ConfigKey{key(model.KindEndpoints, "prod", inventory)},
			map[*Connection]bool{reviews: false, prod: true}},
		{"ServiceEntry with its service keys", withBoth, withBoth, []model.ConfigKey{key(model.KindServiceEntry, "prod", "se"), svcKey},
			map[*Connection]bool{reviews: false, staging: false, prod: true}},
		{"ServiceEntry alone reaches everyone", withBoth, withBoth, []model.ConfigKey{key(model.KindServiceEntry, "prod", "se")},
			map[*Connection]bool{reviews: true, staging: true, prod: true}},
		{"selector Sidecar reaches the proxies it selects", withBoth, withBoth, []model.ConfigKey{key(model.KindSidecar, "default", "reviews")},
			map[*Connection]bool{reviews: true, productpage: false, staging: false, prod: false}},
		{"root Sidecar reaches the proxies it is the default of", withBoth, withBoth, []model.ConfigKey{key(model.KindSidecar, "istio-system", "default")},
			map[*Connection]bool{reviews: false, productpage: true, staging: true, prod: true}},
		{"deleted Sidecar reaches the proxies it selected", withBoth, withRoot, []model.ConfigKey{key(model.KindSidecar, "default", "reviews")},
			map[*Connection]bool{reviews: true, productpage: false, staging: false}},
		{"new Sidecar reaches the proxies it selects", withRoot, withBoth, []model.ConfigKey{key(model.KindSidecar, "default", "reviews")},
			map[*Connection]bool{reviews: true, productpage: false}},
		{"DestinationRule reaches the scopes that see its host", withBoth, withBoth, []model.ConfigKey{key(model.KindDestinationRule, "default", "reviews")},
			map[*Connection]bool{reviews: true, staging: false}},
		{"a gateway change reaches everyone", withBoth, withBoth, []model.ConfigKey{key(model.KindGateway, "default", "gw")},
			map[*Connection]bool{reviews: true, staging: true}},
	}
	for _, tc := range cases {
		req := model.NewPushRequest(true, model.ReasonConfigUpdate, tc.keys...)
		req.Push = tc.next
		scope := newPushScope(req, tc.prev)
		for c, want := range tc.want {
			if got := scope.affects(c); got != want {
				t.Errorf("%s: affects(%s) = %v, want %v", tc.name, c.proxy.ID, got, want)
			}
		}
	}
}

func TestSidecarWarningsLogged(t *testing.T) {
	sc := reviewsSidecar("./*")
	sc.Spec.(*networking.Sidecar).Ingress = []*networking.IstioIngressListener{{DefaultEndpoint: "127.0.0.1:8080"}}
	push := nt.Input{Configs: []model.Config{sc}}.PushContext()
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	logSidecarWarnings(log, model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: model.KindService, Name: "x"}), push)
	if buf.Len() != 0 {
		t.Fatalf("warnings logged for a push that did not touch Sidecars: %s", buf.String())
	}
	logSidecarWarnings(log, model.NewPushRequest(true, model.ReasonConfigUpdate, sc.Key()), push)
	if !strings.Contains(buf.String(), "Sidecar default/reviews: spec.ingress:") {
		t.Fatalf("log does not name spec.ingress: %s", buf.String())
	}
}
