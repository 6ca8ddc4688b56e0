package grpcgen

import (
	"slices"
	"sort"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sorted(in ...string) []string {
	sort.Strings(in)
	return in
}

func TestGeneratorsCoverEveryType(t *testing.T) {
	got := keys(Generators())
	want := []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType}
	sort.Strings(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("type URLs (-want +got):\n%s", diff)
	}
}

func TestListenersByName(t *testing.T) {
	proxy, push := fixture(t)
	requestedNames := []string{
		echoHost + ":7070", "echo:7070", "echo.test:7070", "echo.test.svc:7070",
		"echo:9000",              // TCP port: allowed when named explicitly
		"plain.test.svc",         // single-port service, no port
		"echo:1",                 // no such port
		"echo",                   // several ports, none given
		"nope:7070",              // no such service
		otherHost + ":7070",      // not exported to test
		"echo:notaport", ":7070", // malformed
	}
	got := generate[*listenerv3.Listener](t, model.ListenerType, proxy, push, requestedNames...)
	want := []string{echoHost + ":7070", "echo.test.svc:7070", "echo.test:7070", "echo:7070", "echo:9000", "plain.test.svc"}
	if diff := cmp.Diff(want, keys(got)); diff != "" {
		t.Fatalf("listener names (-want +got):\n%s", diff)
	}
	for name, l := range got {
		hcm := &hcmv3.HttpConnectionManager{}
		if err := l.GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
			t.Fatalf("listener %q: api_listener: %v", name, err)
		}
		rds := hcm.GetRds()
		if rds.GetRouteConfigName() != name {
			t.Errorf("listener %q: route_config_name %q, want the listener name", name, rds.GetRouteConfigName())
		}
		if rds.GetConfigSource().GetAds() == nil {
			t.Errorf("listener %q: RDS config source is not ADS", name)
		}
		filters := hcm.GetHttpFilters()
		if len(filters) != 2 || filters[0].GetName() != faultFilterName || filters[1].GetName() != routerFilterName || filters[1].GetTypedConfig() == nil {
			t.Errorf("listener %q: http filters %v, want the fault filter then a typed router", name, filters)
		}
	}
}

func TestListenersWildcardListHTTPPortsOfVisibleServices(t *testing.T) {
	proxy, push := fixture(t)
	got := generate[*listenerv3.Listener](t, model.ListenerType, proxy, push)
	want := []string{echoHost + ":7070", echoHost + ":8080", plainHost + ":9090"}
	if diff := cmp.Diff(want, keys(got)); diff != "" {
		t.Fatalf("listener names (-want +got):\n%s", diff)
	}
}

func TestRoutesFromVirtualService(t *testing.T) {
	proxy, push := fixture(t)
	got := generate[*routev3.RouteConfiguration](t, model.RouteType, proxy, push, "echo:7070")
	rc := got["echo:7070"]
	if rc == nil {
		t.Fatalf("no route config echo:7070; got %v", keys(got))
	}
	if len(rc.GetVirtualHosts()) != 1 {
		t.Fatalf("virtual hosts: %d, want 1", len(rc.GetVirtualHosts()))
	}
	vh := rc.GetVirtualHosts()[0]
	if diff := cmp.Diff([]string{"echo:7070", echoHost + ":7070", echoHost}, vh.GetDomains()); diff != "" {
		t.Errorf("domains (-want +got):\n%s", diff)
	}
	routes := vh.GetRoutes()
	// The port-8080 match does not apply to port 7070.
	if len(routes) != 2 {
		t.Fatalf("routes: %d, want 2 (header match, split): %v", len(routes), routes)
	}
	canary := routes[0]
	hs := canary.GetMatch().GetHeaders()
	if len(hs) != 1 || hs[0].GetName() != "x-canary" || hs[0].GetStringMatch().GetExact() != "true" {
		t.Errorf("canary headers: %v", hs)
	}
	if canary.GetMatch().GetPrefix() != "/" {
		t.Errorf("canary path: %v, want prefix /", canary.GetMatch().GetPathSpecifier())
	}
	if c := canary.GetRoute().GetCluster(); c != "outbound|7070|v2|"+echoHost {
		t.Errorf("canary cluster %q", c)
	}
	split := routes[1].GetRoute().GetWeightedClusters().GetClusters()
	type cw struct {
		Name   string
		Weight uint32
	}
	var gotSplit []cw
	for _, c := range split {
		gotSplit = append(gotSplit, cw{c.GetName(), c.GetWeight().GetValue()})
	}
	wantSplit := []cw{{"outbound|7070|v1|" + echoHost, 80}, {"outbound|7070|v2|" + echoHost, 20}}
	if diff := cmp.Diff(wantSplit, gotSplit); diff != "" {
		t.Errorf("weighted clusters (-want +got):\n%s", diff)
	}
}

func TestRoutesPortScopedMatch(t *testing.T) {
	proxy, push := fixture(t)
	got := generate[*routev3.RouteConfiguration](t, model.RouteType, proxy, push, echoHost+":8080")
	routes := got[echoHost+":8080"].GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 3 {
		t.Fatalf("routes: %d, want 3", len(routes))
	}
	if p := routes[1].GetMatch().GetPrefix(); p != "/web" {
		t.Errorf("route 1 prefix %q, want /web", p)
	}
	if c := routes[1].GetRoute().GetCluster(); c != "outbound|8080|v2|"+echoHost {
		t.Errorf("route 1 cluster %q: destination port must default to the listener port", c)
	}
}

func TestRoutesDefaultWithoutVirtualService(t *testing.T) {
	proxy, push := fixture(t)
	got := generate[*routev3.RouteConfiguration](t, model.RouteType, proxy, push, "plain:9090")
	routes := got["plain:9090"].GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 1 || routes[0].GetMatch().GetPrefix() != "/" || routes[0].GetRoute().GetCluster() != "outbound|9090||"+plainHost {
		t.Fatalf("default routes: %v", routes)
	}
}

func TestClusters(t *testing.T) {
	proxy, push := fixture(t)
	byName := generate[*clusterv3.Cluster](t, model.ClusterType, proxy, push,
		"outbound|7070|v1|"+echoHost, "outbound|7070||"+echoHost,
		"outbound|7070|v9|"+echoHost, "outbound|7070||"+otherHost, "outbound|1||"+echoHost, "inbound|7070||")
	if diff := cmp.Diff(sorted("outbound|7070||"+echoHost, "outbound|7070|v1|"+echoHost), keys(byName)); diff != "" {
		t.Fatalf("clusters by name (-want +got):\n%s", diff)
	}
	for name, c := range byName {
		if c.GetType() != clusterv3.Cluster_EDS || c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
			t.Errorf("cluster %q: type %v lb %v", name, c.GetType(), c.GetLbPolicy())
		}
		if c.GetEdsClusterConfig().GetServiceName() != name || c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
			t.Errorf("cluster %q: eds config %v", name, c.GetEdsClusterConfig())
		}
	}
	all := generate[*clusterv3.Cluster](t, model.ClusterType, proxy, push)
	var want []string
	for _, port := range []string{"7070", "8080", "9000"} {
		for _, subset := range []string{"", "v1", "v2"} {
			want = append(want, "outbound|"+port+"|"+subset+"|"+echoHost)
		}
	}
	want = append(want, "outbound|9090||"+plainHost)
	sort.Strings(want)
	if diff := cmp.Diff(want, keys(all)); diff != "" {
		t.Fatalf("wildcard clusters (-want +got):\n%s", diff)
	}
}

// lbEndpoint summarises an LbEndpoint for comparison.
type lbEndpoint struct {
	Locality string
	LocW     uint32
	Addr     string
	Health   corev3.HealthStatus
	Weight   uint32
}

func summarise(cla *endpointv3.ClusterLoadAssignment) []lbEndpoint {
	var out []lbEndpoint
	for _, loc := range cla.GetEndpoints() {
		l := loc.GetLocality()
		for _, e := range loc.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, lbEndpoint{
				Locality: l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone(),
				LocW:     loc.GetLoadBalancingWeight().GetValue(),
				Addr:     sa.GetAddress() + ":" + itoa(sa.GetPortValue()),
				Health:   e.GetHealthStatus(),
				Weight:   e.GetLoadBalancingWeight().GetValue(),
			})
		}
	}
	slices.SortFunc(out, func(a, b lbEndpoint) int {
		if a.Addr < b.Addr {
			return -1
		}
		if a.Addr > b.Addr {
			return 1
		}
		return 0
	})
	return out
}

func TestEndpoints(t *testing.T) {
	proxy, push := fixture(t)
	all, v2, http, empty := "outbound|7070||"+echoHost, "outbound|7070|v2|"+echoHost, "outbound|8080||"+echoHost, "outbound|9090||"+plainHost
	got := generate[*endpointv3.ClusterLoadAssignment](t, model.EndpointType, proxy, push, all, v2, http, empty, "outbound|7070|v9|"+echoHost)
	if diff := cmp.Diff(sorted(all, http, v2, empty), keys(got)); diff != "" {
		t.Fatalf("assignments (-want +got):\n%s", diff)
	}
	want := map[string][]lbEndpoint{
		all: {
			{"us-east/a/1", 3, "10.0.0.1:17070", corev3.HealthStatus_HEALTHY, 1},
			{"//", 3, "10.0.0.2:17070", corev3.HealthStatus_UNHEALTHY, 3},
			{"us-east/a/1", 3, "10.0.0.3:17070", corev3.HealthStatus_HEALTHY, 2},
		},
		v2: {
			{"//", 3, "10.0.0.2:17070", corev3.HealthStatus_UNHEALTHY, 3},
			{"us-east/a/1", 2, "10.0.0.3:17070", corev3.HealthStatus_HEALTHY, 2},
		},
		http:  {{"//", 1, "10.0.0.1:18080", corev3.HealthStatus_HEALTHY, 1}},
		empty: nil,
	}
	for name, w := range want {
		if got[name].GetClusterName() != name {
			t.Errorf("%q: cluster_name %q", name, got[name].GetClusterName())
		}
		if diff := cmp.Diff(w, summarise(got[name])); diff != "" {
			t.Errorf("%q endpoints (-want +got):\n%s", name, diff)
		}
	}
}

func TestEndpointsDropDuplicateAddresses(t *testing.T) {
	proxy, push := fixture(t)
	push.Endpoints.Update("other-shard", plainHost, []*model.Endpoint{
		{Address: "10.0.0.9", Port: 9090, ServicePortName: "grpc", Healthy: true, WorkloadName: "a"},
		{Address: "10.0.0.9", Port: 9090, ServicePortName: "grpc", Healthy: true, WorkloadName: "b"},
	})
	got := generate[*endpointv3.ClusterLoadAssignment](t, model.EndpointType, proxy, push, "outbound|9090||"+plainHost)
	if n := len(summarise(got["outbound|9090||"+plainHost])); n != 1 {
		t.Fatalf("endpoints: %d, want 1 (grpc-go rejects duplicate addresses)", n)
	}
}

func TestWildcardResourcesAreConsistent(t *testing.T) {
	proxy, push := fixture(t)
	listeners := generate[*listenerv3.Listener](t, model.ListenerType, proxy, push)
	routes := generate[*routev3.RouteConfiguration](t, model.RouteType, proxy, push)
	clusters := generate[*clusterv3.Cluster](t, model.ClusterType, proxy, push)
	endpoints := generate[*endpointv3.ClusterLoadAssignment](t, model.EndpointType, proxy, push)
	if diff := cmp.Diff(keys(listeners), keys(routes)); diff != "" {
		t.Errorf("every listener needs its route config (-listeners +routes):\n%s", diff)
	}
	if diff := cmp.Diff(keys(clusters), keys(endpoints)); diff != "" {
		t.Errorf("every cluster needs its assignment (-clusters +endpoints):\n%s", diff)
	}
	for name, rc := range routes {
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				refs := []string{r.GetRoute().GetCluster()}
				for _, c := range r.GetRoute().GetWeightedClusters().GetClusters() {
					refs = append(refs, c.GetName())
				}
				for _, ref := range refs {
					if _, ok := clusters[ref]; ref != "" && !ok {
						t.Errorf("route config %q references unknown cluster %q", name, ref)
					}
				}
			}
		}
	}
}

func TestParseClusterName(t *testing.T) {
	port, subset, host, err := parseClusterName("outbound|7070|v1|" + echoHost)
	if err != nil || port != 7070 || subset != "v1" || host != echoHost {
		t.Fatalf("parse: %d %q %q %v", port, subset, host, err)
	}
	if got := clusterName(port, subset, host); got != "outbound|7070|v1|"+echoHost {
		t.Fatalf("format: %q", got)
	}
	for _, bad := range []string{"inbound|7070||", "outbound|x||h", "outbound|1||", "outbound|1|h"} {
		if _, _, _, err := parseClusterName(bad); err == nil {
			t.Errorf("parse %q: want error", bad)
		}
	}
}

// TestStandardFixtureResources runs the shared networkingtest mesh (every
// kind of service) through all four generators: every resource must pass
// ValidateAll and the reviews split must come through.
func TestStandardFixtureResources(t *testing.T) {
	push := networkingtest.Standard().PushContext()
	proxy := networkingtest.Proxy(networkingtest.StandardProxy, "reviews-v1", "default", map[string]string{"app": "reviews", "version": "v1"})
	proxy.Metadata.Generator = model.GeneratorGRPC
	routes := generate[*routev3.RouteConfiguration](t, model.RouteType, proxy, push)
	clusters := generate[*clusterv3.Cluster](t, model.ClusterType, proxy, push)
	listeners := generate[*listenerv3.Listener](t, model.ListenerType, proxy, push)
	generate[*endpointv3.ClusterLoadAssignment](t, model.EndpointType, proxy, push)
	if _, ok := listeners[networkingtest.GreeterHost+":7070"]; !ok {
		t.Errorf("missing greeter listener; got %v", keys(listeners))
	}
	rc := routes[networkingtest.ReviewsHost+":9080"]
	if rc == nil {
		t.Fatalf("no route config for reviews; got %v", keys(routes))
	}
	var split []*routev3.WeightedCluster_ClusterWeight
	for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
		if wc := r.GetRoute().GetWeightedClusters(); wc != nil {
			split = wc.GetClusters()
		}
	}
	if len(split) != 2 || split[0].GetName() != "outbound|9080|v1|"+networkingtest.ReviewsHost || split[0].GetWeight().GetValue() != 80 {
		t.Errorf("reviews split: %v", split)
	}
	if _, ok := clusters["outbound|9080|v3|"+networkingtest.ReviewsHost]; !ok {
		t.Errorf("missing reviews v3 subset cluster; got %v", keys(clusters))
	}
}

func TestInboundListeners(t *testing.T) {
	proxy, push := fixture(t)
	v4, v6 := InboundListenerPrefix+"127.0.0.1:8080", InboundListenerPrefix+"[::]:9090"
	got := generate[*listenerv3.Listener](t, model.ListenerType, proxy, push,
		v4, v6, InboundListenerPrefix+"127.0.0.1", InboundListenerPrefix+"host:80", InboundListenerPrefix+"1.2.3.4:0")
	if diff := cmp.Diff(sorted(v4, v6), keys(got)); diff != "" {
		t.Fatalf("inbound listeners (-want +got):\n%s", diff)
	}
	l := got[v4]
	if sa := l.GetAddress().GetSocketAddress(); sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != 8080 {
		t.Errorf("address %v, want 127.0.0.1:8080", sa)
	}
	if sa := got[v6].GetAddress().GetSocketAddress(); sa.GetAddress() != "::" || sa.GetPortValue() != 9090 {
		t.Errorf("address %v, want [::]:9090", sa)
	}
	filters := l.GetDefaultFilterChain().GetFilters()
	if len(filters) != 1 || filters[0].GetName() != hcmFilterName {
		t.Fatalf("default filter chain filters: %v", filters)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	vhs := hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhs) != 1 || len(vhs[0].GetRoutes()) != 1 || vhs[0].GetRoutes()[0].GetNonForwardingAction() == nil {
		t.Errorf("inline routes %v: want one non-forwarding route", vhs)
	}
	if f := hcm.GetHttpFilters(); len(f) != 1 || f[0].GetName() != routerFilterName {
		t.Errorf("http filters %v: want the router", f)
	}
}

func TestWatchSemantics(t *testing.T) {
	proxy, push := fixture(t)
	for typeURL, gen := range Generators() {
		empty := &model.WatchedResource{TypeURL: typeURL, ResourceNames: map[string]struct{}{}}
		res, err := gen.Generate(proxy, push, empty, nil)
		if err != nil || len(res) != 0 {
			t.Errorf("%s: non-wildcard watch without names: %d resources, %v; want none", model.ShortType(typeURL), len(res), err)
		}
	}
	// A wildcard watch with an explicit short name gets both.
	w := &model.WatchedResource{TypeURL: model.ListenerType, Wildcard: true, ResourceNames: map[string]struct{}{"echo:7070": {}}}
	res, err := ListenerGenerator{}.Generate(proxy, push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range res {
		names = append(names, r.GetName())
	}
	want := []string{echoHost + ":7070", echoHost + ":8080", "echo:7070", plainHost + ":9090"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("wildcard plus name (-want +got):\n%s", diff)
	}
}

// TestBookinfoResources runs Istio's Bookinfo sample through all four
// generators for productpage: every resource passes ValidateAll, and the
// reviews 80/20 VirtualService comes through.
func TestBookinfoResources(t *testing.T) {
	push := networkingtest.Bookinfo(t).PushContext()
	proxy := networkingtest.BookinfoProxy("productpage-v1")
	proxy.Metadata.Generator = model.GeneratorGRPC
	routes := generate[*routev3.RouteConfiguration](t, model.RouteType, proxy, push)
	clusters := generate[*clusterv3.Cluster](t, model.ClusterType, proxy, push)
	generate[*listenerv3.Listener](t, model.ListenerType, proxy, push)
	endpoints := generate[*endpointv3.ClusterLoadAssignment](t, model.EndpointType, proxy, push)
	rc := routes[networkingtest.ReviewsHost+":9080"]
	if rc == nil {
		t.Fatalf("no route config for reviews; got %v", keys(routes))
	}
	split := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters()
	if len(split) != 2 || split[0].GetName() != "outbound|9080|v1|"+networkingtest.ReviewsHost || split[0].GetWeight().GetValue() != 80 {
		t.Errorf("reviews split: %v", split)
	}
	for _, subset := range []string{"v1", "v2", "v3"} {
		name := "outbound|9080|" + subset + "|" + networkingtest.ReviewsHost
		if _, ok := clusters[name]; !ok {
			t.Errorf("missing cluster %q", name)
		}
		if n := len(summarise(endpoints[name])); n != 1 {
			t.Errorf("%q: %d endpoints, want the one %s pod", name, n, subset)
		}
	}
}
