package networkingtest_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

const inventory = "inventory.prod-us1.svc.cluster.local"

// sidecarListenersInput is Bookinfo in default plus inventory.prod-us1
// (http 9080, tcp 7000) and the Sidecars of the given testdata files.
func sidecarListenersInput(t *testing.T, files ...string) nt.Input {
	t.Helper()
	in := nt.Bookinfo(t)
	in.Services = append(in.Services, nt.KubeService("inventory", "prod-us1", "10.96.9.9",
		model.Port{Name: "http", Port: 9080}, model.Port{Name: "tcp", Port: 7000}))
	in.Endpoints[inventory] = []*model.Endpoint{
		nt.Endpoint("10.244.9.9", 9080, "http", map[string]string{"app": "inventory"}),
		nt.Endpoint("10.244.9.9", 7000, "tcp", map[string]string{"app": "inventory"}),
	}
	for _, f := range files {
		path, err := filepath.Abs(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		in.Configs = append(in.Configs, nt.LoadConfigs(t, path, "default")...)
	}
	return in
}

// endpointAddress returns the only endpoint address of a STATIC cluster.
func endpointAddress(t *testing.T, c *clusterv3.Cluster) *corev3.Address {
	t.Helper()
	if c == nil {
		t.Fatal("cluster missing")
	}
	if c.GetType() != clusterv3.Cluster_STATIC {
		t.Errorf("%s: type %v, want STATIC", c.GetName(), c.GetType())
	}
	eps := c.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		t.Fatalf("%s: want one endpoint, got %v", c.GetName(), eps)
	}
	return eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress()
}

func wantSocket(t *testing.T, c *clusterv3.Cluster, ip string, port uint32) {
	t.Helper()
	sa := endpointAddress(t, c).GetSocketAddress()
	if sa.GetAddress() != ip || sa.GetPortValue() != port {
		t.Errorf("%s: endpoint %s:%d, want %s:%d", c.GetName(), sa.GetAddress(), sa.GetPortValue(), ip, port)
	}
}

// chainTarget returns what a filter chain's last filter sends to: the
// cluster of a tcp_proxy, of the inline route of an
// http_connection_manager ("http:" prefixed), or the RDS name ("rds:").
func chainTarget(t *testing.T, fc *listenerv3.FilterChain) string {
	t.Helper()
	fs := fc.GetFilters()
	if len(fs) == 0 {
		t.Fatalf("chain %s has no filters", fc.GetName())
	}
	f := fs[len(fs)-1]
	switch f.GetName() {
	case wellknown.TCPProxy:
		var tp tcpproxyv3.TcpProxy
		if err := f.GetTypedConfig().UnmarshalTo(&tp); err != nil {
			t.Fatal(err)
		}
		return tp.GetCluster()
	case wellknown.HTTPConnectionManager:
		var h hcmv3.HttpConnectionManager
		if err := f.GetTypedConfig().UnmarshalTo(&h); err != nil {
			t.Fatal(err)
		}
		if h.GetRds() != nil {
			return "rds:" + h.GetRds().GetRouteConfigName()
		}
		return "http:" + h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster()
	}
	t.Fatalf("chain %s ends with %s", fc.GetName(), f.GetName())
	return ""
}

// chainsByPort maps destination_port to the targets of the chains matching it.
func chainsByPort(t *testing.T, l *listenerv3.Listener) map[uint32][]string {
	t.Helper()
	out := map[uint32][]string{}
	for _, fc := range l.GetFilterChains() {
		p := fc.GetFilterChainMatch().GetDestinationPort().GetValue()
		out[p] = append(out[p], chainTarget(t, fc))
	}
	return out
}

// allTo reports whether targets is non-empty and every one is want (one
// chain per PeerAuthentication variant: mTLS and plaintext by default).
func allTo(targets []string, want string) bool {
	for _, g := range targets {
		if g != want {
			return false
		}
	}
	return len(targets) > 0
}

func vhostNames(s snapshot, route string) []string {
	var out []string
	for _, vh := range s.routes[route].GetVirtualHosts() {
		out = append(out, vh.GetName())
	}
	return out
}

func TestSidecarIngressListeners(t *testing.T) {
	push := sidecarListenersInput(t, "sidecar-listeners.yaml").PushContext()
	proxy := nt.BookinfoProxy("reviews-v1")
	ip := proxy.IPAddresses[0]
	s := generate(t, proxy, push)

	// Inbound clusters come from the ingress listeners' default endpoints.
	wantSocket(t, s.clusters["inbound|9080||"], "127.0.0.1", 8080)
	if p := endpointAddress(t, s.clusters["inbound|9090||"]).GetPipe(); p.GetPath() != "/var/run/someuds.sock" {
		t.Errorf("inbound|9090||: endpoint %v, want pipe /var/run/someuds.sock", endpointAddress(t, s.clusters["inbound|9090||"]))
	}
	wantSocket(t, s.clusters["inbound|9443||"], ip, 8443) // 0.0.0.0 is the instance IP
	// Connection pools: the listener's own, else inboundConnectionPool.
	for name, want := range map[string]uint32{"inbound|9080||": 50, "inbound|9090||": 100, "inbound|9443||": 50} {
		th := s.clusters[name].GetCircuitBreakers().GetThresholds()
		if len(th) != 1 || th[0].GetMaxConnections().GetValue() != want {
			t.Errorf("%s: circuit breakers %v, want max_connections %d", name, th, want)
		}
	}
	if got := s.clusters["inbound|9090||"].GetConnectTimeout().AsDuration(); got != time.Second {
		t.Errorf("inbound|9090||: connect_timeout %v, want 1s", got)
	}
	var inbound []string
	for name := range s.clusters {
		if len(name) > 8 && name[:8] == "inbound|" {
			inbound = append(inbound, name)
		}
	}
	slices.Sort(inbound)
	if want := []string{"inbound|9080||", "inbound|9090||", "inbound|9443||"}; !slices.Equal(inbound, want) {
		t.Errorf("inbound clusters %v, want %v", inbound, want)
	}

	// virtualInbound: one chain per captured ingress port, with its protocol.
	vi := s.listeners[listener.VirtualInbound]
	chains := chainsByPort(t, vi)
	if got := chains[9080]; !allTo(got, "http:inbound|9080||") {
		t.Errorf("virtualInbound chains for 9080 = %v, want the inbound HTTP route to inbound|9080||", got)
	}
	if got := chains[9090]; !allTo(got, "inbound|9090||") {
		t.Errorf("virtualInbound chains for 9090 = %v, want tcp_proxy to inbound|9090||", got)
	}
	if got := chains[9443]; got != nil {
		t.Errorf("virtualInbound has chains for the captureMode NONE port 9443: %v", got)
	}

	// captureMode NONE: a real listener on the instance IP.
	bound := s.listeners[ip+"_9443"]
	if bound == nil {
		t.Fatalf("no listener %s_9443; have %v", ip, sortedKeys(s.listeners))
	}
	if sa := bound.GetAddress().GetSocketAddress(); sa.GetAddress() != ip || sa.GetPortValue() != 9443 {
		t.Errorf("bound listener address %v", sa)
	}
	if bound.GetBindToPort() != nil && !bound.GetBindToPort().GetValue() {
		t.Error("bound listener has bind_to_port false")
	}
	if bound.GetUseOriginalDst().GetValue() {
		t.Error("bound listener uses original_dst")
	}
	for _, f := range bound.GetListenerFilters() {
		if f.GetName() == wellknown.OriginalDestination {
			t.Error("bound listener has the original_dst listener filter")
		}
	}
	if got := chainsByPort(t, bound); len(got) != 1 || !allTo(got[9443], "http:inbound|9443||") {
		t.Errorf("bound listener chains %v, want 9443 → inbound|9443||", got)
	}

	// Egress: port 9080 reaches prod-us1 only; inventory's tcp port 7000 is
	// selected by no listener (the catch-all does not select prod-us1).
	if got, want := vhostNames(s, "9080"), []string{inventory + ":9080", "allow_any"}; !slices.Equal(got, want) {
		t.Errorf("route 9080 virtual hosts = %v, want %v", got, want)
	}
	if l := s.listeners["10.96.9.9_7000"]; l != nil {
		t.Error("listener 10.96.9.9_7000 built for a port no egress listener selects")
	}
	if s.clusters["outbound|7000||"+inventory] == nil || s.clusters["outbound|9080||details.default.svc.cluster.local"] == nil {
		t.Error("CDS lacks a cluster of a service an egress listener selects")
	}
}

func TestSidecarSelectorBeatsNamespaceDefault(t *testing.T) {
	push := sidecarListenersInput(t, "sidecar-listeners.yaml").PushContext()
	s := generate(t, nt.BookinfoProxy("ratings-v1"), push)
	// The namespace default has no ingress: inbound comes from the service,
	// to the original destination (no endpoints of its own).
	if c := s.clusters["inbound|9080||"]; c.GetType() != clusterv3.Cluster_ORIGINAL_DST || c.GetLoadAssignment() != nil {
		t.Errorf("inbound|9080||: %v, want ORIGINAL_DST", c)
	}
	if s.clusters["inbound|9090||"] != nil {
		t.Error("ratings got the reviews Sidecar's ingress cluster")
	}
	if got := chainsByPort(t, s.listeners[listener.VirtualInbound])[9080]; !allTo(got, "http:inbound|9080||") {
		t.Errorf("virtualInbound 9080 chains = %v", got)
	}
	want := []string{"details.default.svc.cluster.local:9080", "productpage.default.svc.cluster.local:9080",
		"ratings.default.svc.cluster.local:9080", "reviews.default.svc.cluster.local:9080", "allow_any"}
	if got := vhostNames(s, "9080"); !slices.Equal(got, want) {
		t.Errorf("route 9080 virtual hosts = %v, want %v", got, want)
	}
	if s.clusters["outbound|9080||"+inventory] != nil {
		t.Error("namespace default Sidecar lets ratings see prod-us1")
	}
}

func TestSidecarEgressBind(t *testing.T) {
	push := sidecarListenersInput(t, "sidecar-listeners.yaml", "sidecar-egress-bind.yaml").PushContext()
	s := generate(t, nt.BookinfoProxy("productpage-v1"), push)
	http := s.listeners["127.0.0.1_9080"]
	if http == nil {
		t.Fatalf("no listener 127.0.0.1_9080; have %v", sortedKeys(s.listeners))
	}
	if http.GetBindToPort() != nil {
		t.Errorf("127.0.0.1_9080 bind_to_port = %v, want unset (bound)", http.GetBindToPort())
	}
	if got := chainsByPort(t, http)[0]; !slices.Equal(got, []string{"rds:9080"}) {
		t.Errorf("127.0.0.1_9080 chains = %v, want RDS 9080", got)
	}
	tcp := s.listeners["127.0.0.1_7000"]
	if tcp == nil {
		t.Fatalf("no listener 127.0.0.1_7000 (captureMode NONE without bind binds localhost); have %v", sortedKeys(s.listeners))
	}
	if tcp.GetBindToPort() != nil {
		t.Errorf("127.0.0.1_7000 bind_to_port = %v, want unset (bound)", tcp.GetBindToPort())
	}
	if got := chainsByPort(t, tcp)[0]; !slices.Equal(got, []string{"outbound|7000||" + inventory}) {
		t.Errorf("127.0.0.1_7000 chains = %v", got)
	}
	for _, name := range []string{"0.0.0.0_9080", "10.96.9.9_7000"} {
		if s.listeners[name] != nil {
			t.Errorf("listener %s built besides the bound one", name)
		}
	}
	want := []string{"details.default.svc.cluster.local:9080", "productpage.default.svc.cluster.local:9080",
		"ratings.default.svc.cluster.local:9080", "reviews.default.svc.cluster.local:9080", "allow_any"}
	if got := vhostNames(s, "9080"); !slices.Equal(got, want) {
		t.Errorf("route 9080 virtual hosts = %v, want %v", got, want)
	}
}

// TestSidecarEgressBindCacheKey checks that an outbound listener bound by
// a Sidecar does not share a cache entry with the captured listener of the
// same name that other proxies get.
func TestSidecarEgressBindCacheKey(t *testing.T) {
	in := sidecarListenersInput(t, "sidecar-listeners.yaml")
	in.Configs = append(in.Configs, model.Config{
		Meta: model.Meta{Kind: model.KindSidecar, Name: "details", Namespace: "default"},
		Spec: &networking.Sidecar{
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "details"}},
			Egress: []*networking.IstioEgressListener{{
				Port: &networking.SidecarPort{Number: 9080, Protocol: "HTTP", Name: "http"}, Bind: "0.0.0.0",
				CaptureMode: networking.CaptureMode_NONE, Hosts: []string{"./*"},
			}},
		},
	})
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	push := in.PushContext()
	for _, tc := range []struct {
		workload string
		bound    bool
	}{{"ratings-v1", false}, {"details-v1", true}, {"ratings-v1", false}} {
		l := generate(t, nt.BookinfoProxy(tc.workload), push).listeners["0.0.0.0_9080"]
		if l == nil {
			t.Fatalf("%s: no listener 0.0.0.0_9080", tc.workload)
		}
		if got := l.GetBindToPort() == nil; got != tc.bound {
			t.Errorf("%s: 0.0.0.0_9080 bound = %v, want %v", tc.workload, got, tc.bound)
		}
	}
}
