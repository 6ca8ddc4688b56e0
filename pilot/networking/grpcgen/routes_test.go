package grpcgen

import (
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
)

func exact(s string) *networking.StringMatch {
	return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: s}}
}

func TestBuildRouteMatch(t *testing.T) {
	in := &networking.HTTPMatchRequest{
		Uri:            &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/echo\\..*"}},
		IgnoreUriCase:  true,
		Method:         exact("POST"),
		Headers:        map[string]*networking.StringMatch{"b-prefix": {MatchType: &networking.StringMatch_Prefix{Prefix: "pre"}}, "a-present": {}},
		WithoutHeaders: map[string]*networking.StringMatch{"x-debug": exact("1")},
	}
	got, err := buildRouteMatch(in, stringMatchHeaders)
	if err != nil {
		t.Fatal(err)
	}
	if err := validateDeep(got); err != nil {
		t.Fatalf("ValidateAll: %v", err)
	}
	if got.GetSafeRegex().GetRegex() != "/echo\\..*" || got.GetCaseSensitive().GetValue() {
		t.Errorf("path: %v case_sensitive %v", got.GetPathSpecifier(), got.GetCaseSensitive())
	}
	type hm struct {
		Name, Exact, Prefix string
		Present, Invert     bool
	}
	var hs []hm
	for _, h := range got.GetHeaders() {
		hs = append(hs, hm{h.GetName(), h.GetStringMatch().GetExact(), h.GetStringMatch().GetPrefix(), h.GetPresentMatch(), h.GetInvertMatch()})
	}
	want := []hm{
		{Name: ":method", Exact: "POST"},
		{Name: "a-present", Present: true},
		{Name: "b-prefix", Prefix: "pre"},
		{Name: "x-debug", Exact: "1", Invert: true},
	}
	if diff := cmp.Diff(want, hs); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if _, err := buildRouteMatch(&networking.HTTPMatchRequest{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Regex{}}}, stringMatchHeaders); err == nil {
		t.Error("empty uri regex: want error")
	}
}

func TestMatchApplies(t *testing.T) {
	proxy, push := fixture(t)
	proxy.Metadata.Labels = map[string]string{"app": "client"}
	svc := push.ServiceByHost(echoHost)
	port, _ := svc.PortByNumber(7070)
	rc := routeContext{proxy: proxy, push: push, vsNamespace: "test", target: target{name: "echo:7070", service: svc, port: port}}
	cases := []struct {
		name string
		m    *networking.HTTPMatchRequest
		want bool
	}{
		{"empty", &networking.HTTPMatchRequest{}, true},
		{"same port", &networking.HTTPMatchRequest{Port: 7070}, true},
		{"other port", &networking.HTTPMatchRequest{Port: 8080}, false},
		{"mesh gateway", &networking.HTTPMatchRequest{Gateways: []string{"mesh"}}, true},
		{"other gateway", &networking.HTTPMatchRequest{Gateways: []string{"istio-system/ingress"}}, false},
		{"source labels match", &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "client"}}, true},
		{"source labels differ", &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "other"}}, false},
		{"source namespace", &networking.HTTPMatchRequest{SourceNamespace: "test"}, true},
		{"other source namespace", &networking.HTTPMatchRequest{SourceNamespace: "prod"}, false},
		{"query params (grpc-go ignores the route)", &networking.HTTPMatchRequest{QueryParams: map[string]*networking.StringMatch{"a": exact("b")}}, false},
	}
	for _, c := range cases {
		if got := matchApplies(rc, c.m); got != c.want {
			t.Errorf("%s: matchApplies = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestBuildRouteActionTimeoutRetriesAndSkips(t *testing.T) {
	proxy, push := fixture(t)
	svc := push.ServiceByHost(echoHost)
	port, _ := svc.PortByNumber(8080)
	rc := routeContext{proxy: proxy, push: push, vsNamespace: "test", target: target{name: "echo:8080", service: svc, port: port}}
	hr := &networking.HTTPRoute{
		Route: []*networking.HTTPRouteDestination{
			{Destination: &networking.Destination{Host: "plain"}},
		},
		Timeout: durationpb.New(3 * time.Second),
		Retries: &networking.HTTPRetry{Attempts: 2},
	}
	got, err := buildRouteAction(rc, hr)
	if err != nil {
		t.Fatal(err)
	}
	want := &routev3.RouteAction{
		// plain has one port (9090): the destination defaults to it.
		ClusterSpecifier:  &routev3.RouteAction_Cluster{Cluster: "outbound|9090||" + plainHost},
		MaxStreamDuration: &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(3 * time.Second)},
	}
	want.RetryPolicy = &routev3.RetryPolicy{RetryOn: grpcRetryOn, NumRetries: got.GetRetryPolicy().GetNumRetries()}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("action (-want +got):\n%s", diff)
	}
	if got.GetRetryPolicy().GetNumRetries().GetValue() != 2 {
		t.Errorf("num_retries %v, want 2", got.GetRetryPolicy().GetNumRetries())
	}

	zero := &networking.HTTPRoute{Route: []*networking.HTTPRouteDestination{
		{Destination: &networking.Destination{Host: "echo", Subset: "v1"}},
		{Destination: &networking.Destination{Host: "echo", Subset: "v2"}},
	}}
	if a, err := buildRouteAction(rc, zero); err != nil || a != nil {
		t.Errorf("all-zero weights: action %v err %v, want the route skipped", a, err)
	}

	vs := &networking.VirtualService{Http: []*networking.HTTPRoute{
		{Redirect: &networking.HTTPRedirect{Uri: "/x"}},
		{DirectResponse: &networking.HTTPDirectResponse{Status: 503}},
		{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "echo"}}}},
	}}
	routes, _, err := buildVSRoutes(rc, vs)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 1 || routes[0].GetRoute().GetCluster() != "outbound|8080||"+echoHost {
		t.Errorf("routes %v: want only the forwarding route, to the listener's port", routes)
	}
}
