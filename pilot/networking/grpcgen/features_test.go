package grpcgen

import (
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// bookinfoRoutes generates productpage-v1's proxyless route configuration
// for host:9080 with the Bookinfo VirtualServices replaced by file's.
func bookinfoRoutes(t *testing.T, file, host string) []*routev3.Route {
	t.Helper()
	in := networkingtest.Bookinfo(t)
	var keep []model.Config
	for _, c := range in.Configs {
		if c.Kind != model.KindVirtualService {
			keep = append(keep, c)
		}
	}
	in.Configs = append(keep, networkingtest.LoadConfigs(t, "bookinfo-networking/"+file, "default")...)
	proxy := networkingtest.BookinfoProxy("productpage-v1")
	proxy.Metadata.Generator = model.GeneratorGRPC
	name := host + ":9080"
	rc := generate[*routev3.RouteConfiguration](t, model.RouteType, proxy, in.PushContext(), name)[name]
	if rc == nil || len(rc.GetVirtualHosts()) != 1 {
		t.Fatalf("route configuration %s: %v", name, rc)
	}
	return rc.GetVirtualHosts()[0].GetRoutes()
}

func routeFault(t *testing.T, r *routev3.Route) *faultv3.HTTPFault {
	t.Helper()
	a := r.GetTypedPerFilterConfig()[faultFilterName]
	if a == nil {
		t.Fatalf("route %q: no fault config", r.GetName())
	}
	var f faultv3.HTTPFault
	if err := a.UnmarshalTo(&f); err != nil {
		t.Fatal(err)
	}
	return &f
}

func jason(r *routev3.Route) bool {
	h := r.GetMatch().GetHeaders()
	return len(h) == 1 && h[0].GetName() == "end-user" && h[0].GetStringMatch().GetExact() == "jason"
}

func TestBookinfoSemanticsProxyless(t *testing.T) {
	const (
		reviews = "reviews.default.svc.cluster.local"
		ratings = "ratings.default.svc.cluster.local"
		details = "details.default.svc.cluster.local"
	)
	cases := []struct {
		file, host string
		check      func(t *testing.T, routes []*routev3.Route)
	}{
		{"virtual-service-reviews-jason-v2-v3.yaml", reviews, func(t *testing.T, routes []*routev3.Route) {
			if len(routes) != 2 || !jason(routes[0]) || routes[0].GetRoute().GetCluster() != "outbound|9080|v2|"+reviews ||
				routes[1].GetRoute().GetCluster() != "outbound|9080|v3|"+reviews {
				t.Errorf("routes %v", routes)
			}
		}},
		{"virtual-service-ratings-test-delay.yaml", ratings, func(t *testing.T, routes []*routev3.Route) {
			if len(routes) != 2 || !jason(routes[0]) {
				t.Fatalf("routes %v", routes)
			}
			f := routeFault(t, routes[0])
			if f.GetDelay().GetFixedDelay().AsDuration() != 7*time.Second || f.GetDelay().GetPercentage().GetNumerator() != 1000000 {
				t.Errorf("delay %v", f.GetDelay())
			}
			if routes[1].GetTypedPerFilterConfig() != nil {
				t.Errorf("fallback route has a fault")
			}
		}},
		{"virtual-service-ratings-test-abort.yaml", ratings, func(t *testing.T, routes []*routev3.Route) {
			if f := routeFault(t, routes[0]); !jason(routes[0]) || f.GetAbort().GetHttpStatus() != 500 || f.GetAbort().GetPercentage().GetNumerator() != 1000000 {
				t.Errorf("abort %v", f)
			}
		}},
		{"fault-injection-details-v1.yaml", details, func(t *testing.T, routes []*routev3.Route) {
			if f := routeFault(t, routes[0]); f.GetAbort().GetHttpStatus() != 555 {
				t.Errorf("abort %v", f)
			}
		}},
		{"virtual-service-reviews-80-20.yaml", reviews, func(t *testing.T, routes []*routev3.Route) {
			w := routes[0].GetRoute().GetWeightedClusters().GetClusters()
			if len(w) != 2 || w[0].GetWeight().GetValue() != 80 || w[1].GetName() != "outbound|9080|v2|"+reviews || w[1].GetWeight().GetValue() != 20 {
				t.Errorf("split %v", w)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) { c.check(t, bookinfoRoutes(t, c.file, c.host)) })
	}
}

func TestGRPCRetriesFaultAndWarnings(t *testing.T) {
	proxy, push := fixture(t)
	svc := push.ServiceByHost(echoHost)
	port, _ := svc.PortByNumber(7070)
	rc := routeContext{proxy: proxy, push: push, vsNamespace: "test", target: target{name: "echo:7070", service: svc, port: port}}
	vs := &networking.VirtualService{Hosts: []string{"echo"}, Http: []*networking.HTTPRoute{{
		Retries: &networking.HTTPRetry{Attempts: 3, RetryOn: "5xx,unavailable,resource-exhausted", PerTryTimeout: durationpb.New(time.Second), Backoff: durationpb.New(20 * time.Millisecond)},
		Timeout: durationpb.New(2 * time.Second),
		Fault: &networking.HTTPFaultInjection{Abort: &networking.HTTPFaultInjection_Abort{
			ErrorType:  &networking.HTTPFaultInjection_Abort_GrpcStatus{GrpcStatus: "UNAVAILABLE"},
			Percentage: &networking.Percent{Value: 100},
		}},
		Mirror:  &networking.Destination{Host: "plain"},
		Headers: &networking.Headers{Request: &networking.Headers_HeaderOperations{Set: map[string]string{"a": "b"}}},
		Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "echo"}}},
	}}}
	routes, warns, err := buildVSRoutes(rc, vs)
	if err != nil || len(warns) != 0 || len(routes) != 1 {
		t.Fatalf("routes %v warnings %q err %v", routes, warns, err)
	}
	if err := validateDeep(routes[0]); err != nil {
		t.Fatal(err)
	}
	ra := routes[0].GetRoute()
	rp := ra.GetRetryPolicy()
	if rp.GetRetryOn() != "unavailable,resource-exhausted" || rp.GetNumRetries().GetValue() != 3 || rp.GetRetryBackOff().GetBaseInterval().AsDuration() != 20*time.Millisecond {
		t.Errorf("retry policy %v", rp)
	}
	if ra.GetMaxStreamDuration().GetMaxStreamDuration().AsDuration() != 2*time.Second {
		t.Errorf("max stream duration %v", ra.GetMaxStreamDuration())
	}
	if f := routeFault(t, routes[0]); f.GetAbort().GetGrpcStatus() != 14 || f.GetAbort().GetPercentage().GetNumerator() != 1000000 {
		t.Errorf("abort %v", f)
	}
	got := UnsupportedFields(vs)
	for _, field := range []string{"http[0].mirror", "http[0].headers", "http[0].retries.perTryTimeout", `http[0].retries.retryOn conditions "5xx"`} {
		if !slices.ContainsFunc(got, func(w string) bool { return strings.HasPrefix(w, field) }) {
			t.Errorf("no warning for %s in %q", field, got)
		}
	}
}

func TestGRPCDelegate(t *testing.T) {
	proxy, push := fixture(t)
	svc := push.ServiceByHost(echoHost)
	port, _ := svc.PortByNumber(7070)
	rc := routeContext{proxy: proxy, push: push, vsNamespace: "test", target: target{name: "echo:7070", service: svc, port: port}}
	vs := &networking.VirtualService{Hosts: []string{"echo"}, Http: []*networking.HTTPRoute{
		{Delegate: &networking.Delegate{Name: "nowhere", Namespace: "test"}},
	}}
	routes, warns, err := buildVSRoutes(rc, vs)
	if err != nil || len(routes) != 0 || len(warns) != 1 || !strings.Contains(warns[0], "test/nowhere not found") {
		t.Errorf("missing delegate: routes %v warnings %q err %v", routes, warns, err)
	}
}
