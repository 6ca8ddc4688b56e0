package envoyfilter_test

import (
	"bytes"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	httpinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

const root = "istio-system"

// envoyFilter decodes an EnvoyFilter spec written in YAML.
func envoyFilter(t testing.TB, ns, name, spec string) model.Config {
	t.Helper()
	return nt.EnvoyFilter(t, ns, name, spec)
}

// recorder is a Reporter that keeps log lines and statuses.
type recorder struct {
	mu     sync.Mutex
	logs   bytes.Buffer
	status map[string]string
}

func (r *recorder) reporter() envoyfilter.Reporter {
	r.status = map[string]string{}
	return envoyfilter.Reporter{
		Log: slog.New(slog.NewTextHandler(&lockedWriter{r}, nil)),
		Status: func(name, status string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.status[name] != envoyfilter.StatusError {
				r.status[name] = status
			}
		},
	}
}

func (r *recorder) logText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs.String()
}

type lockedWriter struct{ r *recorder }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.logs.Write(p)
}

func sidecar(ns string, labels map[string]string) *model.Proxy {
	return &model.Proxy{ID: "sidecar~10.0.0.1~pod." + ns + "~" + ns + ".svc.cluster.local", Type: model.SidecarProxy,
		Namespace: ns, Metadata: model.NodeMetadata{Namespace: ns, Labels: labels, IstioVersion: "1.24.0"}}
}

// patchesFor compiles cfgs and selects for a sidecar in default with app=a.
func patchesFor(t testing.TB, rep envoyfilter.Reporter, cfgs ...model.Config) *envoyfilter.Patches {
	t.Helper()
	return envoyfilter.Compile(cfgs, root, rep).For(sidecar("default", map[string]string{"app": "a"}))
}

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func httpFilter(t testing.TB, name string, m proto.Message) *hcm.HttpFilter {
	return &hcm.HttpFilter{Name: name, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(t, m)}}
}

func socket(addr string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

// hcmFilter is an HTTP connection manager with fault and router filters,
// over RDS route (rds != "") or an inline route configuration.
func hcmFilter(t testing.TB, rds string, inline *routev3.RouteConfiguration) *listenerv3.Filter {
	h := &hcm.HttpConnectionManager{StatPrefix: "p", HttpFilters: []*hcm.HttpFilter{
		httpFilter(t, "envoy.filters.http.fault", &faultv3.HTTPFault{}),
		httpFilter(t, "envoy.filters.http.router", &routerv3.Router{}),
	}}
	if inline != nil {
		h.RouteSpecifier = &hcm.HttpConnectionManager_RouteConfig{RouteConfig: inline}
	} else {
		h.RouteSpecifier = &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: rds,
			ConfigSource: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
				ResourceApiVersion: corev3.ApiVersion_V3}}}
	}
	return &listenerv3.Filter{Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, h)}}
}

func tcpFilter(t testing.TB, cluster string) *listenerv3.Filter {
	return &listenerv3.Filter{Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t,
		&tcpproxy.TcpProxy{StatPrefix: cluster, ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: cluster}})}}
}

// outboundListener is 0.0.0.0_8080: listener filters tls_inspector and
// http_inspector, chain "http" (HCM over RDS "8080") and chain "tls"
// (transport tls, SNI a.example.com, ALPN h2, tcp_proxy).
func outboundListener(t testing.TB) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name: "0.0.0.0_8080", Address: socket("0.0.0.0", 8080),
		ListenerFilters: []*listenerv3.ListenerFilter{
			{Name: "envoy.filters.listener.tls_inspector", ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(t, &tlsinspector.TlsInspector{})}},
			{Name: "envoy.filters.listener.http_inspector", ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(t, &httpinspector.HttpInspector{})}},
		},
		FilterChains: []*listenerv3.FilterChain{
			{Name: "http", Filters: []*listenerv3.Filter{hcmFilter(t, "8080", nil)}},
			{Name: "tls", FilterChainMatch: &listenerv3.FilterChainMatch{TransportProtocol: "tls", ServerNames: []string{"a.example.com"},
				ApplicationProtocols: []string{"h2"}}, Filters: []*listenerv3.Filter{tcpFilter(t, "outbound|8080||a.default.svc.cluster.local")}},
		},
	}
}

// virtualInboundListener is virtualInbound (15006) with a chain for
// destination port 9080 whose HCM has an inline route configuration.
func virtualInboundListener(t testing.TB) *listenerv3.Listener {
	rc := &routev3.RouteConfiguration{Name: "inbound|9080||", VirtualHosts: []*routev3.VirtualHost{{
		Name: "inbound|http|9080", Domains: []string{"*"}, Routes: []*routev3.Route{{
			Name: "default", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "inbound|9080||"}}},
		}},
	}}}
	return &listenerv3.Listener{
		Name: "virtualInbound", Address: socket("0.0.0.0", 15006),
		FilterChains: []*listenerv3.FilterChain{
			{Name: "0.0.0.0_9080", FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(9080)},
				Filters: []*listenerv3.Filter{hcmFilter(t, "", rc)}},
			{Name: "0.0.0.0_9090", FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(9090)},
				Filters: []*listenerv3.Filter{tcpFilter(t, "inbound|9090||")}},
		},
	}
}

// routeConfig is "8080" with virtual hosts a.example.com:8080 (routes
// "r1" to a cluster and "redirect") and b.example.com:8080 (route "b").
func routeConfig() *routev3.RouteConfiguration {
	to := func(name, cluster string) *routev3.Route {
		return &routev3.Route{Name: name, Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}}}
	}
	redirect := &routev3.Route{Name: "redirect", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/old"}},
		Action: &routev3.Route_Redirect{Redirect: &routev3.RedirectAction{PathRewriteSpecifier: &routev3.RedirectAction_PathRedirect{PathRedirect: "/new"}}}}
	return &routev3.RouteConfiguration{Name: "8080", VirtualHosts: []*routev3.VirtualHost{
		{Name: "a.example.com:8080", Domains: []string{"a.example.com"}, Routes: []*routev3.Route{redirect, to("r1", "outbound|8080||a.example.com")}},
		{Name: "b.example.com:8080", Domains: []string{"b.example.com"}, Routes: []*routev3.Route{to("b", "outbound|8080||b.example.com")}},
	}}
}

// edsCluster is outbound|8080|v1|a.default.svc.cluster.local.
func edsCluster(subset, host string, port uint32) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 "outbound|" + strconv.FormatUint(uint64(port), 10) + "|" + subset + "|" + host,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}},
		ConnectTimeout: durationpb.New(10 * time.Second),
	}
}

func staticCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name}}
}

// names lists the names of named messages.
func names[T interface{ GetName() string }](list []T) []string {
	out := make([]string, 0, len(list))
	for _, e := range list {
		out = append(out, e.GetName())
	}
	return out
}

// httpFilters returns the HTTP filter names of the HCM of chain i of l.
func httpFilters(t testing.TB, l *listenerv3.Listener, chain int) []string {
	t.Helper()
	return names(hcmOf(t, l, chain).GetHttpFilters())
}

func hcmOf(t testing.TB, l *listenerv3.Listener, chain int) *hcm.HttpConnectionManager {
	t.Helper()
	for _, f := range l.GetFilterChains()[chain].GetFilters() {
		if f.GetName() == "envoy.filters.network.http_connection_manager" {
			h := &hcm.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
				t.Fatal(err)
			}
			return h
		}
	}
	t.Fatalf("chain %d has no HCM", chain)
	return nil
}
