package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// routesInput is one Gateway with n HTTPRoutes, each with its own host,
// a path match and a backend.
func routesInput(n int) gateway.Input {
	all := gwv1.NamespacesFromAll
	in := gateway.Input{
		GatewayClasses: []*gwv1.GatewayClass{{ObjectMeta: metav1.ObjectMeta{Name: "istio"}, Spec: gwv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}},
		Gateways: []*gwv1.Gateway{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gw"}, Spec: gwv1.GatewaySpec{
			GatewayClassName: "istio",
			Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType,
				AllowedRoutes: &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &all}}}},
		}}},
	}
	web := nt.KubeService("web", "default", "10.0.0.80", model.Port{Name: "http", Port: 8080})
	in.Service = func(h string) *model.Service {
		if h == web.Hostname {
			return web
		}
		return nil
	}
	for i := range n {
		in.HTTPRoutes = append(in.HTTPRoutes, benchRoute("default", fmt.Sprintf("r%d", i)))
	}
	return in
}

func benchRoute(ns, name string) *gwv1.HTTPRoute {
	prefix := gwv1.PathMatchPathPrefix
	return &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw", Namespace: ptr(gwv1.Namespace("default"))}}},
			Hostnames:       []gwv1.Hostname{gwv1.Hostname(name + ".example.com")},
			Rules: []gwv1.HTTPRouteRule{{
				Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: ptr("/" + name)}}},
				BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
					Name: "web", Namespace: ptr(gwv1.Namespace("default")), Port: ptr(gwv1.PortNumber(8080)),
				}}}},
			}},
		},
	}
}

// BenchmarkTranslate1000Routes is one translation of a Gateway with 1,000
// attached HTTPRoutes (what each change costs the controller).
func BenchmarkTranslate1000Routes(b *testing.B) {
	in := routesInput(1000)
	b.ReportAllocs()
	for b.Loop() {
		out := gateway.Translate(in)
		if len(out.HTTPRoutes) != 1000 {
			b.Fatalf("%d routes with status", len(out.HTTPRoutes))
		}
	}
}

// BenchmarkStatus1000Routes measures, on a real API server, the time from
// creating 1,000 HTTPRoutes attached to one Gateway until the API
// server's watch has shown each of them Accepted (issue 19's figure;
// Istio: 2 s). Each iteration uses a new namespace. Run with
// -benchtime=1x: status-s is that time. GATEWAY_BENCH_ROUTES changes the
// number of routes.
func BenchmarkStatus1000Routes(b *testing.B) {
	env := kubetest.Start(b)
	crds := filepath.Join(fixtures.RepoRoot(b), "charts", "meshpilot", "crds", "gateway-api-standard.gen.yaml")
	if err := kubetest.InstallCRDs(b.Context(), env.Config(), crds); err != nil {
		b.Fatal(err)
	}
	cfg := env.Config()
	cfg.QPS, cfg.Burst = 1000, 2000
	client, err := gwclient.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	web := nt.KubeService("web", "default", "10.0.0.80", model.Port{Name: "http", Port: 8080})
	// GATEWAY_BENCH_QPS sets the status writer's QPS and burst.
	qps, _ := strconv.Atoi(os.Getenv("GATEWAY_BENCH_QPS"))
	c, err := gateway.NewController(gateway.Options{
		QPS: float64(qps), Burst: qps,
		Client: client, Store: memory.New(), Service: serviceLookup([]*model.Service{web}),
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	go func() { _ = c.WriteStatus(ctx) }()
	v1 := client.GatewayV1()
	if _, err := v1.GatewayClasses().Create(ctx, &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "istio"},
		Spec: gwv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	in := routesInput(0)
	if _, err := v1.Gateways("default").Create(ctx, in.Gateways[0], metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("GATEWAY_BENCH_ROUTES")); err == nil && v > 0 {
		n = v
	}
	for i := 0; b.Loop(); i++ {
		ns := fmt.Sprintf("bench%d", i)
		if _, err := env.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		// The routes' backend is Service web of namespace default.
		if _, err := v1.ReferenceGrants("default").Create(ctx, &gwv1.ReferenceGrant{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "from-" + ns},
			Spec: gwv1.ReferenceGrantSpec{
				From: []gwv1.ReferenceGrantFrom{{Group: gateway.Group, Kind: gateway.KindHTTPRoute, Namespace: gwv1.Namespace(ns)}},
				To:   []gwv1.ReferenceGrantTo{{Kind: "Service"}},
			},
		}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		w, err := v1.HTTPRoutes(ns).Watch(ctx, anyVersion)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for j := range n {
			if _, err := v1.HTTPRoutes(ns).Create(ctx, benchRoute(ns, fmt.Sprintf("r%d", j)), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		created := time.Since(start)
		accepted := map[string]bool{}
		events, last := 0, ""
		deadline := time.After(2 * time.Minute)
		for len(accepted) < n {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					// The API server ended the watch: watch again (from
					// the cache's current objects).
					if w, err = v1.HTTPRoutes(ns).Watch(ctx, anyVersion); err != nil {
						b.Fatal(err)
					}
					continue
				}
				events++
				r, isRoute := ev.Object.(*gwv1.HTTPRoute)
				if !isRoute {
					last = fmt.Sprintf("%s %T %v", ev.Type, ev.Object, ev.Object)
					continue
				}
				if last = parentConditions(r); last == "Accepted=True/Accepted ResolvedRefs=True/ResolvedRefs" {
					accepted[r.Name] = true
				}
			case <-deadline:
				b.Fatalf("%d of %d routes accepted after 2 minutes (%d events; last: %s)", len(accepted), n, events, last)
			}
		}
		w.Stop()
		b.ReportMetric(created.Seconds(), "create-s")
		b.ReportMetric(time.Since(start).Seconds(), "status-s")
		b.ReportMetric(time.Since(start).Seconds()-created.Seconds(), "after-create-s")
	}
}

// BenchmarkTranslate1000GRPCRoutes is BenchmarkTranslate1000Routes with
// each HTTPRoute replaced by a GRPCRoute of one method match.
func BenchmarkTranslate1000GRPCRoutes(b *testing.B) {
	in := routesInput(1000)
	for _, r := range in.HTTPRoutes {
		in.GRPCRoutes = append(in.GRPCRoutes, &gwv1.GRPCRoute{
			ObjectMeta: r.ObjectMeta,
			Spec: gwv1.GRPCRouteSpec{
				CommonRouteSpec: r.Spec.CommonRouteSpec, Hostnames: r.Spec.Hostnames,
				Rules: []gwv1.GRPCRouteRule{{
					Matches:     []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Service: ptr("bench.Service"), Method: ptr(r.Name)}}},
					BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: r.Spec.Rules[0].BackendRefs[0].BackendRef}},
				}},
			},
		})
	}
	in.HTTPRoutes = nil
	b.ReportAllocs()
	for b.Loop() {
		out := gateway.Translate(in)
		if len(out.GRPCRoutes) != 1000 {
			b.Fatalf("%d routes with status", len(out.GRPCRoutes))
		}
	}
}

// backendTLSInput is routesInput(n) with each route sending to its own
// Service svcI, and, with policies, one BackendTLSPolicy per Service whose
// CA is ConfigMap ca (a real PEM certificate, checked as bootstrap checks
// it: parsed each translation).
func backendTLSInput(b *testing.B, n int, policies bool) gateway.Input {
	in := routesInput(n)
	svcs := map[string]*model.Service{}
	for i, r := range in.HTTPRoutes {
		name := fmt.Sprintf("svc%d", i)
		r.Spec.Rules[0].BackendRefs[0].Name = gwv1.ObjectName(name)
		svc := nt.KubeService(name, "default", fmt.Sprintf("10.1.%d.%d", i/256, i%256), model.Port{Name: "http", Port: 8080})
		svcs[svc.Hostname] = svc
		if !policies {
			continue
		}
		in.BackendTLSPolicies = append(in.BackendTLSPolicies, &gwv1.BackendTLSPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: gwv1.BackendTLSPolicySpec{
				TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Kind: "Service", Name: gwv1.ObjectName(name)}}},
				Validation: gwv1.BackendTLSPolicyValidation{
					Hostname:          gwv1.PreciseHostname(name + ".example.com"),
					CACertificateRefs: []gwv1.LocalObjectReference{{Kind: "ConfigMap", Name: "ca"}},
					SubjectAltNames:   []gwv1.SubjectAltName{{Type: gwv1.HostnameSubjectAltNameType, Hostname: gwv1.Hostname(name + ".example.com")}},
				},
			},
		})
	}
	in.Service = func(h string) *model.Service { return svcs[h] }
	ca := map[string]string{"ca.crt": testCAPEM(b)}
	in.ConfigMapCA = func(ns, name string) error {
		if ns == "default" && name == "ca" {
			return gateway.CACertError(ca, true)
		}
		return gateway.CACertError(nil, false)
	}
	return in
}

// BenchmarkTranslate1000RoutesBackendTLS is one translation of 1,000
// HTTPRoutes to 1,000 Services, without and with a BackendTLSPolicy on
// each Service (1,000 DestinationRules and policy statuses more).
func BenchmarkTranslate1000RoutesBackendTLS(b *testing.B) {
	for _, policies := range []bool{false, true} {
		b.Run(fmt.Sprintf("policies=%t", policies), func(b *testing.B) {
			in := backendTLSInput(b, 1000, policies)
			b.ReportAllocs()
			for b.Loop() {
				out := gateway.Translate(in)
				if policies && len(out.BackendTLSPolicies) != 1000 {
					b.Fatalf("%d policies with status", len(out.BackendTLSPolicies))
				}
			}
		})
	}
}
