package route_test

import (
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

const (
	productpageHost = "productpage.default.svc.cluster.local"
	reviewsHost     = "reviews.default.svc.cluster.local"
	ratingsHost     = "ratings.default.svc.cluster.local"
	detailsHost     = "details.default.svc.cluster.local"
)

// bookinfoWith is the Bookinfo mesh with its VirtualServices replaced by
// those of files (paths relative to the repo's testdata/, or absolute).
func bookinfoWith(t *testing.T, files ...string) *model.PushContext {
	t.Helper()
	in := nt.Bookinfo(t)
	var keep []model.Config
	for _, c := range in.Configs {
		if c.Kind != model.KindVirtualService {
			keep = append(keep, c)
		}
	}
	for _, f := range files {
		keep = append(keep, nt.LoadConfigs(t, f, "default")...)
	}
	in.Configs = keep
	return in.PushContext()
}

// hostRoutes builds route configuration 9080 for productpage-v1's sidecar
// (validated as a whole) and returns the routes of host.
func hostRoutes(t *testing.T, push *model.PushContext, host string) []*routev3.Route {
	t.Helper()
	rc := route.BuildRouteConfiguration(nt.BookinfoProxy("productpage-v1"), push, "9080", discard)
	if err := nt.Validate(rc); err != nil {
		t.Fatalf("route configuration 9080: %v", err)
	}
	for _, vh := range rc.GetVirtualHosts() {
		if vh.GetName() == host+":9080" {
			return vh.GetRoutes()
		}
	}
	t.Fatalf("no virtual host %s:9080", host)
	return nil
}

func fault(t *testing.T, r *routev3.Route) *faultv3.HTTPFault {
	t.Helper()
	a := r.GetTypedPerFilterConfig()[route.FaultFilterName]
	if a == nil {
		t.Fatalf("route %q: no %s config", r.GetName(), route.FaultFilterName)
	}
	var f faultv3.HTTPFault
	if err := a.UnmarshalTo(&f); err != nil {
		t.Fatal(err)
	}
	return &f
}

func isJason(r *routev3.Route) bool {
	h := r.GetMatch().GetHeaders()
	return len(h) == 1 && h[0].GetName() == "end-user" && h[0].GetStringMatch().GetExact() == "jason" && !h[0].GetInvertMatch()
}

func percent(p *typev3.FractionalPercent) float64 {
	switch p.GetDenominator() {
	case typev3.FractionalPercent_MILLION:
		return float64(p.GetNumerator()) / 10000
	case typev3.FractionalPercent_TEN_THOUSAND:
		return float64(p.GetNumerator()) / 100
	}
	return float64(p.GetNumerator())
}

// TestBookinfoSemantics checks the Envoy fields that carry the semantics of
// Istio's own Bookinfo VirtualServices.
func TestBookinfoSemantics(t *testing.T) {
	cases := []struct {
		file, host string
		check      func(t *testing.T, routes []*routev3.Route)
	}{
		{"virtual-service-reviews-jason-v2-v3.yaml", reviewsHost, func(t *testing.T, routes []*routev3.Route) {
			if len(routes) != 2 || !isJason(routes[0]) || clusterOf(routes[0]) != "outbound|9080|v2|"+reviewsHost {
				t.Fatalf("jason route %v", routes)
			}
			if routes[1].GetMatch().GetPrefix() != "/" || len(routes[1].GetMatch().GetHeaders()) != 0 || clusterOf(routes[1]) != "outbound|9080|v3|"+reviewsHost {
				t.Errorf("fallback route %v", routes[1])
			}
		}},
		{"virtual-service-ratings-test-delay.yaml", ratingsHost, func(t *testing.T, routes []*routev3.Route) {
			if len(routes) != 2 || !isJason(routes[0]) {
				t.Fatalf("routes %v", routes)
			}
			f := fault(t, routes[0])
			if f.GetDelay().GetFixedDelay().AsDuration() != 7*time.Second || percent(f.GetDelay().GetPercentage()) != 100 || f.GetAbort() != nil {
				t.Errorf("delay fault %v", f)
			}
			if routes[1].GetTypedPerFilterConfig() != nil || clusterOf(routes[1]) != "outbound|9080|v1|"+ratingsHost {
				t.Errorf("non-jason route %v", routes[1])
			}
		}},
		{"virtual-service-ratings-test-abort.yaml", ratingsHost, func(t *testing.T, routes []*routev3.Route) {
			if len(routes) != 2 || !isJason(routes[0]) {
				t.Fatalf("routes %v", routes)
			}
			f := fault(t, routes[0])
			if f.GetAbort().GetHttpStatus() != 500 || percent(f.GetAbort().GetPercentage()) != 100 || f.GetDelay() != nil {
				t.Errorf("abort fault %v", f)
			}
			if routes[1].GetTypedPerFilterConfig() != nil {
				t.Errorf("non-jason route has a fault: %v", routes[1])
			}
		}},
		{"fault-injection-details-v1.yaml", detailsHost, func(t *testing.T, routes []*routev3.Route) {
			if len(routes) != 2 {
				t.Fatalf("routes %v", routes)
			}
			f := fault(t, routes[0])
			if f.GetAbort().GetHttpStatus() != 555 || percent(f.GetAbort().GetPercentage()) != 100 || routes[0].GetMatch().GetPrefix() != "/" {
				t.Errorf("abort fault %v on %v", f, routes[0].GetMatch())
			}
			if clusterOf(routes[0]) != "outbound|9080|v1|"+detailsHost {
				t.Errorf("cluster %q", clusterOf(routes[0]))
			}
		}},
		{"virtual-service-reviews-80-20.yaml", reviewsHost, func(t *testing.T, routes []*routev3.Route) {
			if len(routes) != 1 {
				t.Fatalf("routes %v", routes)
			}
			w := routes[0].GetRoute().GetWeightedClusters().GetClusters()
			if len(w) != 2 || w[0].GetName() != "outbound|9080|v1|"+reviewsHost || w[0].GetWeight().GetValue() != 80 ||
				w[1].GetName() != "outbound|9080|v2|"+reviewsHost || w[1].GetWeight().GetValue() != 20 {
				t.Errorf("80/20 %v", w)
			}
			rp := routes[0].GetRoute().GetRetryPolicy()
			if rp.GetRetryOn() != route.DefaultRetryOn || rp.GetNumRetries().GetValue() != 2 || !slices.Equal(rp.GetRetriableStatusCodes(), []uint32{503}) {
				t.Errorf("Istio's default retry policy: %v", rp)
			}
			if routes[0].GetRoute().GetTimeout().AsDuration() != 0 {
				t.Errorf("timeout %v, want 0 (disabled)", routes[0].GetRoute().GetTimeout())
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			push := bookinfoWith(t, "bookinfo-networking/"+c.file)
			c.check(t, hostRoutes(t, push, c.host))
		})
	}
}

// TestFeatures checks redirect, rewrite, retries, mirror, headers, CORS,
// regex and delegate from testdata/features.yaml.
func TestFeatures(t *testing.T) {
	abs, err := filepath.Abs("testdata/features.yaml")
	if err != nil {
		t.Fatal(err)
	}
	routes := hostRoutes(t, bookinfoWith(t, abs), productpageHost)
	byName := map[string]*routev3.Route{}
	var names []string
	for _, r := range routes {
		byName[r.GetName()] = r
		names = append(names, r.GetName())
	}
	want := []string{"old-login", "api", "static", "delegated-one", "delegated-rest", ""}
	if !slices.Equal(names, want) {
		t.Fatalf("route names %q, want %q", names, want)
	}

	t.Run("redirect", func(t *testing.T) {
		r := byName["old-login"]
		rd := r.GetRedirect()
		if r.GetMatch().GetPath() != "/login-old" || rd.GetPathRedirect() != "/login" || rd.GetHostRedirect() != "productpage.example.com" ||
			rd.GetSchemeRedirect() != "https" || rd.GetPortRedirect() != 8443 || rd.GetResponseCode() != routev3.RedirectAction_PERMANENT_REDIRECT {
			t.Errorf("redirect %v", r)
		}
	})

	api := byName["api"]
	ra := api.GetRoute()
	t.Run("regex match", func(t *testing.T) {
		m := api.GetMatch()
		if m.GetSafeRegex().GetRegex() != "/api/v[0-9]+/products" || m.GetCaseSensitive() == nil || m.GetCaseSensitive().GetValue() {
			t.Errorf("path match %v", m)
		}
		if q := m.GetQueryParameters(); len(q) != 1 || q[0].GetName() != "debug" || q[0].GetStringMatch().GetExact() != "1" {
			t.Errorf("query %v", q)
		}
		if h := m.GetHeaders(); len(h) != 1 || h[0].GetName() != "x-canary" || !h[0].GetInvertMatch() || h[0].GetStringMatch().GetExact() != "true" {
			t.Errorf("withoutHeaders %v", h)
		}
	})
	t.Run("rewrite", func(t *testing.T) {
		if ra.GetRegexRewrite().GetPattern().GetRegex() != "^/api/v[0-9]+/" || ra.GetRegexRewrite().GetSubstitution() != "/api/" {
			t.Errorf("regex rewrite %v", ra.GetRegexRewrite())
		}
		// rewrite.authority wins over headers.request.set[host].
		if ra.GetHostRewriteLiteral() != "productpage.internal" {
			t.Errorf("host rewrite %q", ra.GetHostRewriteLiteral())
		}
		if s := byName["static"].GetRoute(); s.GetPrefixRewrite() != "/assets" || s.GetRegexRewrite() != nil {
			t.Errorf("prefix rewrite %v", s)
		}
	})
	t.Run("timeout and retries", func(t *testing.T) {
		if ra.GetTimeout().AsDuration() != 3*time.Second || ra.GetMaxStreamDuration().GetGrpcTimeoutHeaderMax().AsDuration() != 3*time.Second {
			t.Errorf("timeout %v max stream %v", ra.GetTimeout(), ra.GetMaxStreamDuration())
		}
		rp := ra.GetRetryPolicy()
		if rp.GetNumRetries().GetValue() != 4 || rp.GetPerTryTimeout().AsDuration() != time.Second ||
			rp.GetRetryOn() != "gateway-error,connect-failure,retriable-status-codes" || !slices.Equal(rp.GetRetriableStatusCodes(), []uint32{503, 504}) ||
			rp.GetRetryBackOff().GetBaseInterval().AsDuration() != 50*time.Millisecond || len(rp.GetRetryHostPredicate()) != 1 {
			t.Errorf("retry policy %v", rp)
		}
		if rp := byName["static"].GetRoute().GetRetryPolicy(); rp != nil {
			t.Errorf("attempts 0: retry policy %v, want none", rp)
		}
	})
	t.Run("mirror", func(t *testing.T) {
		m := ra.GetRequestMirrorPolicies()
		if len(m) != 1 || m[0].GetCluster() != "outbound|9080|v2|"+productpageHost || percent(m[0].GetRuntimeFraction().GetDefaultValue()) != 12.5 {
			t.Errorf("mirror %v", m)
		}
		m = byName["static"].GetRoute().GetRequestMirrorPolicies()
		if len(m) != 2 || m[0].GetCluster() != "outbound|9080||"+detailsHost || percent(m[0].GetRuntimeFraction().GetDefaultValue()) != 50 ||
			m[1].GetCluster() != "outbound|9080||"+ratingsHost || percent(m[1].GetRuntimeFraction().GetDefaultValue()) != 100 {
			t.Errorf("mirrors %v", m)
		}
	})
	t.Run("headers", func(t *testing.T) {
		type hv struct {
			K, V string
			A    corev3.HeaderValueOption_HeaderAppendAction
		}
		flat := func(in []*corev3.HeaderValueOption) []hv {
			var out []hv
			for _, o := range in {
				out = append(out, hv{o.GetHeader().GetKey(), o.GetHeader().GetValue(), o.GetAppendAction()})
			}
			return out
		}
		if got := flat(api.GetRequestHeadersToAdd()); !slices.Equal(got, []hv{
			{"x-route", "api", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			{"x-trace", "on", corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
		}) {
			t.Errorf("request headers to add %v", got)
		}
		if !slices.Equal(api.GetRequestHeadersToRemove(), []string{"x-internal"}) || !slices.Equal(api.GetResponseHeadersToRemove(), []string{"server"}) {
			t.Errorf("remove %v %v", api.GetRequestHeadersToRemove(), api.GetResponseHeadersToRemove())
		}
		if got := flat(api.GetResponseHeadersToAdd()); !slices.Equal(got, []hv{{"cache-control", "no-store", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}}) {
			t.Errorf("response headers to add %v", got)
		}
		w := byName["static"].GetRoute().GetWeightedClusters().GetClusters()
		if len(w) != 2 || len(w[0].GetRequestHeadersToAdd()) != 1 || w[0].GetRequestHeadersToAdd()[0].GetHeader().GetKey() != "x-subset" || w[1].GetRequestHeadersToAdd() != nil {
			t.Errorf("per-destination headers %v", w)
		}
	})
	t.Run("cors", func(t *testing.T) {
		var cp corsv3.CorsPolicy
		if err := api.GetTypedPerFilterConfig()[route.CORSFilterName].UnmarshalTo(&cp); err != nil {
			t.Fatal(err)
		}
		o := cp.GetAllowOriginStringMatch()
		if len(o) != 2 || o[0].GetExact() != "https://example.com" || o[1].GetSafeRegex().GetRegex() != `https://.*\.example\.org` {
			t.Errorf("origins %v", o)
		}
		if cp.GetAllowMethods() != "GET,POST" || cp.GetAllowHeaders() != "x-custom" || cp.GetExposeHeaders() != "x-exposed" || cp.GetMaxAge() != "86400" ||
			!cp.GetAllowCredentials().GetValue() || cp.GetForwardNotMatchingPreflights() == nil || cp.GetForwardNotMatchingPreflights().GetValue() ||
			percent(cp.GetFilterEnabled().GetDefaultValue()) != 100 {
			t.Errorf("cors %v", &cp)
		}
	})
	t.Run("delegate", func(t *testing.T) {
		one, rest := byName["delegated-one"], byName["delegated-rest"]
		if one.GetMatch().GetPrefix() != "/reviews/1" || clusterOf(one) != "outbound|9080|v2|"+reviewsHost || one.GetRoute().GetTimeout().AsDuration() != 5*time.Second {
			t.Errorf("delegate route with a narrower match, root timeout: %v", one)
		}
		if rest.GetMatch().GetPrefix() != "/reviews" || clusterOf(rest) != "outbound|9080|v1|"+reviewsHost || rest.GetRoute().GetTimeout().AsDuration() != time.Second {
			t.Errorf("delegate route without match, own timeout: %v", rest)
		}
	})
}

func TestUnsupportedFieldsWarn(t *testing.T) {
	vss := nt.LoadConfigs(t, "bookinfo-networking/virtual-service-ratings-test-delay.yaml", "default")
	if w := route.UnsupportedFields(vss[0].Spec.(*networking.VirtualService)); len(w) != 0 {
		t.Errorf("Bookinfo delay: warnings %q, want none", w)
	}
	vs := &networking.VirtualService{Hosts: []string{"ratings"}, Http: []*networking.HTTPRoute{{
		Fault: &networking.HTTPFaultInjection{
			Delay: &networking.HTTPFaultInjection_Delay{HttpDelayType: &networking.HTTPFaultInjection_Delay_ExponentialDelay{ExponentialDelay: durationpb.New(time.Second)}},
			Abort: &networking.HTTPFaultInjection_Abort{ErrorType: &networking.HTTPFaultInjection_Abort_Http2Error{Http2Error: "REFUSED_STREAM"}},
		},
		Retries: &networking.HTTPRetry{Attempts: 1, RetryRemoteLocalities: wrapperspb.Bool(true)},
		Headers: &networking.Headers{Response: &networking.Headers_HeaderOperations{Set: map[string]string{":status": "200"}}},
		Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "ratings"}}},
	}, {Delegate: &networking.Delegate{Name: "missing"}}}}
	t.Run("static", func(t *testing.T) {
		got := route.UnsupportedFields(vs)
		for _, field := range []string{"http[0].fault.delay.exponentialDelay", "http[0].fault.abort.http2Error", "http[0].headers.response.set[:status]"} {
			if !slices.ContainsFunc(got, func(w string) bool { return strings.HasPrefix(w, field+":") }) {
				t.Errorf("no warning for %s in %q", field, got)
			}
		}
		// retryRemoteLocalities is carried out (retry_priority), so not warned.
		if slices.ContainsFunc(got, func(w string) bool { return strings.Contains(w, "retryRemoteLocalities") }) {
			t.Errorf("warnings %q name retryRemoteLocalities", got)
		}
	})
	t.Run("translation", func(t *testing.T) {
		tr, err := route.TranslateVirtualService(vs, "default", route.Options{Port: 9080, Domain: "cluster.local",
			Delegates: func(string, string) (*networking.VirtualService, bool) { return nil, false }})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(tr.Warnings, func(w string) bool {
			return strings.HasPrefix(w, "http[1].delegate: VirtualService default/missing not found")
		}) {
			t.Errorf("warnings %q: want the missing delegate named", tr.Warnings)
		}
		// The exponential delay is dropped; the route keeps no fault at all.
		if len(tr.Routes) != 1 || tr.Routes[0].GetTypedPerFilterConfig() != nil {
			t.Errorf("routes %v", tr.Routes)
		}
	})
}

func TestGeneratorLogsWarnings(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf}, nil))
	in := nt.Standard()
	vs := in.Configs[1].Spec.(*networking.VirtualService)
	vs = proto.Clone(vs).(*networking.VirtualService)
	vs.Http[1].Fault = &networking.HTTPFaultInjection{Abort: &networking.HTTPFaultInjection_Abort{
		ErrorType: &networking.HTTPFaultInjection_Abort_Http2Error{Http2Error: "REFUSED_STREAM"},
	}}
	in.Configs[1].Spec = vs
	w := &model.WatchedResource{TypeURL: model.RouteType, ResourceNames: map[string]struct{}{"9080": {}}}
	if _, err := (route.Generator{Logger: log}).Generate(nt.Proxy("10.9.9.9", "c", "default", nil), in.PushContext(), w, &model.PushRequest{Full: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "http[1].fault.abort.http2Error") || !strings.Contains(buf.String(), "default/reviews") {
		t.Errorf("log %q: want a warning naming the field and the VirtualService", buf.String())
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
