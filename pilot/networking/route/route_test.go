package route_test

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

var discard = slog.New(slog.DiscardHandler)

func vhosts(t *testing.T, rc *routev3.RouteConfiguration) map[string]*routev3.VirtualHost {
	t.Helper()
	nt.ValidateRecursively(t, rc)
	out := map[string]*routev3.VirtualHost{}
	seen := map[string]string{}
	for _, vh := range rc.GetVirtualHosts() {
		out[vh.GetName()] = vh
		for _, d := range vh.GetDomains() {
			if prev, dup := seen[d]; dup {
				t.Errorf("route %s: domain %q in %s and %s", rc.GetName(), d, prev, vh.GetName())
			}
			seen[d] = vh.GetName()
		}
	}
	return out
}

func clusterOf(r *routev3.Route) string { return r.GetRoute().GetCluster() }

func TestBuildRouteConfiguration(t *testing.T) {
	push := nt.Standard().PushContext()
	client := nt.Proxy("10.9.9.9", "client", "default", nil)

	rc := route.BuildRouteConfiguration(client, push, "9080", discard)
	vh := vhosts(t, rc)
	if len(rc.GetVirtualHosts()) != 2 || rc.GetVirtualHosts()[1].GetName() != route.AllowAnyVirtualHost {
		t.Fatalf("9080 virtual hosts %v, want reviews then allow_any", vh)
	}
	reviews := vh[nt.ReviewsHost+":9080"]
	// No HOST:PORT domains: the port of the Host header is ignored, as in Istio.
	if !rc.GetIgnorePortInHostMatching() {
		t.Error("route configuration 9080 matches the Host header's port; want ignore_port_in_host_matching")
	}
	wantDomains := []string{nt.ReviewsHost, nt.ReviewsHost + ".", "reviews", "reviews.default.svc", "reviews.default", nt.ReviewsVIP}
	if !slices.Equal(reviews.GetDomains(), wantDomains) {
		t.Errorf("reviews domains %v, want %v", reviews.GetDomains(), wantDomains)
	}
	routes := reviews.GetRoutes()
	if len(routes) != 2 {
		t.Fatalf("reviews routes %v, want 2", routes)
	}
	jason := routes[0]
	if jason.GetName() != "jason.user" || clusterOf(jason) != "outbound|9080|v2|"+nt.ReviewsHost {
		t.Errorf("jason route: name %q cluster %q", jason.GetName(), clusterOf(jason))
	}
	if h := jason.GetMatch().GetHeaders(); len(h) != 1 || h[0].GetName() != "end-user" || h[0].GetStringMatch().GetExact() != "jason" {
		t.Errorf("jason header match %v", h)
	}
	split := routes[1].GetRoute().GetWeightedClusters().GetClusters()
	if len(split) != 2 || split[0].GetName() != "outbound|9080|v1|"+nt.ReviewsHost || split[0].GetWeight().GetValue() != 80 ||
		split[1].GetName() != "outbound|9080|v2|"+nt.ReviewsHost || split[1].GetWeight().GetValue() != 20 {
		t.Errorf("80/20 split %v", split)
	}
	if routes[1].GetMatch().GetPrefix() != "/" || routes[1].GetRoute().GetTimeout().AsDuration() != 0 {
		t.Errorf("split route match %v timeout %v", routes[1].GetMatch(), routes[1].GetRoute().GetTimeout())
	}
	if any := vh[route.AllowAnyVirtualHost]; !slices.Equal(any.GetDomains(), []string{"*"}) || clusterOf(any.GetRoutes()[0]) != "PassthroughCluster" {
		t.Errorf("allow_any %v", any)
	}

	// A client in another namespace gets no short name; a service without VIP no VIP domain.
	other := nt.Proxy("10.9.9.8", "other", "db", nil)
	vh = vhosts(t, route.BuildRouteConfiguration(other, push, "9080", discard))
	if d := vh[nt.ReviewsHost+":9080"].GetDomains(); slices.Contains(d, "reviews") || !slices.Contains(d, "reviews.default") {
		t.Errorf("cross-namespace domains %v", d)
	}
	vh = vhosts(t, route.BuildRouteConfiguration(client, push, "80", discard))
	ext := vh[nt.ExternalHost+":80"]
	if !slices.Equal(ext.GetDomains(), []string{nt.ExternalHost, nt.ExternalHost + "."}) {
		t.Errorf("external domains %v", ext.GetDomains())
	}
	if r := ext.GetRoutes(); len(r) != 1 || r[0].GetName() != "default" || clusterOf(r[0]) != "outbound|80||"+nt.ExternalHost {
		t.Errorf("external default route %v", r)
	}

	for _, name := range []string{"3306", "nope", "0", "1234"} {
		rc := route.BuildRouteConfiguration(client, push, name, discard)
		if rc.GetName() != name || len(rc.GetVirtualHosts()) != 0 {
			t.Errorf("route %q: %v, want empty", name, rc)
		}
	}
}

func TestRegistryOnly(t *testing.T) {
	in := nt.Standard()
	in.Mesh = &meshconfig.MeshConfig{OutboundTrafficPolicy: &meshconfig.MeshConfig_OutboundTrafficPolicy{Mode: meshconfig.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY}}
	rc := route.BuildRouteConfiguration(nt.Proxy("10.9.9.9", "c", "default", nil), in.PushContext(), "7070", discard)
	vh := vhosts(t, rc)
	block := vh[route.BlockAllVirtualHost]
	if block == nil || block.GetRoutes()[0].GetDirectResponse().GetStatus() != 502 || vh[route.AllowAnyVirtualHost] != nil {
		t.Errorf("REGISTRY_ONLY virtual hosts %v", rc.GetVirtualHosts())
	}
}

func TestNoDuplicateDomains(t *testing.T) {
	in := nt.Standard()
	// A ServiceEntry-style host equal to the kube service's "NAME.NS" domain, and a second VIP clash.
	in.Services = append(in.Services, &model.Service{
		Hostname: "reviews.default", Name: "reviews.default", Namespace: "default", Address: nt.ReviewsVIP,
		Ports: []model.Port{{Name: "http", Port: 9080, Protocol: model.ProtocolHTTP}}, Registry: model.RegistryServiceEntry,
	})
	rc := route.BuildRouteConfiguration(nt.Proxy("10.9.9.9", "c", "default", nil), in.PushContext(), "9080", discard)
	vh := vhosts(t, rc) // fails on duplicates
	if d := vh[nt.ReviewsHost+":9080"].GetDomains(); slices.Contains(d, "reviews.default") || !slices.Contains(d, nt.ReviewsHost) {
		t.Errorf("kube service domains %v", d)
	}
}

func TestBuildHTTPRoutes(t *testing.T) {
	sm := func(kind, v string) *networking.StringMatch {
		switch kind {
		case "exact":
			return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: v}}
		case "prefix":
			return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: v}}
		}
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: v}}
	}
	vs := &networking.VirtualService{Hosts: []string{"reviews"}, Http: []*networking.HTTPRoute{
		{
			Name: "api",
			Match: []*networking.HTTPMatchRequest{
				{Name: "exact", Uri: sm("exact", "/v1"), Method: sm("exact", "GET"), IgnoreUriCase: true},
				{Uri: sm("prefix", "/v2"), Authority: sm("prefix", "reviews"), QueryParams: map[string]*networking.StringMatch{"q": sm("regex", "a+")}},
				{Uri: sm("regex", "/v[3-9]"), Headers: map[string]*networking.StringMatch{"x-b": sm("prefix", "b"), "x-a": sm("regex", ".*")}},
				{Uri: sm("prefix", "/other-port"), Port: 8080},
				{Uri: sm("prefix", "/canary"), SourceLabels: map[string]string{"app": "productpage"}},
			},
			Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "ratings.other.svc.cluster.local", Port: &networking.PortSelector{Number: 8000}}}},
			Timeout: durationpb.New(2 * time.Second),
		},
		{Match: []*networking.HTTPMatchRequest{{Port: 8080}}, Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "x"}}}},
		{
			Match:    []*networking.HTTPMatchRequest{{Uri: sm("exact", "/old")}},
			Redirect: &networking.HTTPRedirect{Uri: "/new", RedirectCode: 302},
		},
		{Route: []*networking.HTTPRouteDestination{
			{Destination: &networking.Destination{Host: "reviews", Subset: "v1"}, Weight: 100},
			{Destination: &networking.Destination{Host: "reviews", Subset: "v2"}, Weight: 0},
		}},
	}}
	routes, err := route.BuildHTTPRoutes(vs, "default", 9080, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		nt.ValidateRecursively(t, r)
	}
	if len(routes) != 5 {
		t.Fatalf("got %d routes, want 5 (port-8080 and sourceLabels matches dropped): %v", len(routes), routes)
	}
	ratings := "outbound|8000||ratings.other.svc.cluster.local"
	r0 := routes[0]
	if r0.GetName() != "api.exact" || r0.GetMatch().GetPath() != "/v1" || r0.GetMatch().GetCaseSensitive().GetValue() ||
		r0.GetMatch().GetHeaders()[0].GetName() != ":method" || clusterOf(r0) != ratings || r0.GetRoute().GetTimeout().AsDuration() != 2*time.Second {
		t.Errorf("route 0: %v", r0)
	}
	r1 := routes[1]
	if r1.GetName() != "api" || r1.GetMatch().GetPrefix() != "/v2" || r1.GetMatch().GetHeaders()[0].GetName() != ":authority" ||
		r1.GetMatch().GetHeaders()[0].GetStringMatch().GetPrefix() != "reviews" ||
		r1.GetMatch().GetQueryParameters()[0].GetStringMatch().GetSafeRegex().GetRegex() != "a+" {
		t.Errorf("route 1: %v", r1)
	}
	r2 := routes[2]
	if h := r2.GetMatch().GetHeaders(); r2.GetMatch().GetSafeRegex().GetRegex() != "/v[3-9]" || len(h) != 2 || h[0].GetName() != "x-a" || h[1].GetStringMatch().GetPrefix() != "b" {
		t.Errorf("route 2: %v", r2)
	}
	if rd := routes[3].GetRedirect(); rd.GetPathRedirect() != "/new" || rd.GetResponseCode() != routev3.RedirectAction_FOUND {
		t.Errorf("redirect: %v", routes[3])
	}
	if r4 := routes[4]; clusterOf(r4) != "outbound|9080|v1|reviews.default.svc.cluster.local" || r4.GetMatch().GetPrefix() != "/" {
		t.Errorf("weight-0 destination not dropped: %v", r4)
	}

	withLabels, err := route.BuildHTTPRoutesForProxy(vs, "default", 9080, "cluster.local", map[string]string{"app": "productpage"})
	if err != nil || len(withLabels) != 6 || withLabels[3].GetMatch().GetPrefix() != "/canary" {
		t.Errorf("sourceLabels match not kept for a matching client: %v %v", err, withLabels)
	}

	if _, err := route.BuildHTTPRoutes(&networking.VirtualService{Http: []*networking.HTTPRoute{{}}}, "default", 80, "cluster.local"); err == nil {
		t.Errorf("http route without destination: no error")
	}
}

func TestGenerator(t *testing.T) {
	push := nt.Standard().PushContext()
	w := &model.WatchedResource{TypeURL: model.RouteType, ResourceNames: map[string]struct{}{"9080": {}, "7070": {}, "bogus": {}}}
	res, err := route.Generator{}.Generate(nt.Proxy("10.9.9.9", "c", "default", nil), push, w, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range res {
		var rc routev3.RouteConfiguration
		if err := r.GetResource().UnmarshalTo(&rc); err != nil || rc.GetName() != r.GetName() {
			t.Fatalf("%s: %v", r.GetName(), err)
		}
		nt.ValidateRecursively(t, &rc)
		names = append(names, r.GetName())
	}
	if !slices.Equal(names, []string{"7070", "9080", "bogus"}) {
		t.Errorf("names %v", names)
	}
}
