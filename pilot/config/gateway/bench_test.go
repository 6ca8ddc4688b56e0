package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwv1client "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/typed/apis/v1"

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

// BenchmarkStatus1000Routes measures, on a real API server, how long the
// status of 1,000 HTTPRoutes attached to one Gateway takes to be written
// (issue 19's figure), as howardjohn/gateway-api-bench's attached-routes
// test measures it (Istio 1.26: setup 2 s, teardown 20 s, 311 writes):
//
//   - create-s: creating the routes, GATEWAY_BENCH_CLIENTS (8) at once;
//   - attached-s: from the last create until the API server's watch shows
//     the Gateway's attachedRoutes at 1,000 (the reference's setup time);
//   - accepted-s: from the last create until every route shows Accepted
//     and ResolvedRefs from istio.io/gateway-controller;
//   - status-s: from the first create to the later of the two;
//   - teardown-s: from the last delete until attachedRoutes is 0;
//   - gw-writes: the Gateway's status updates over both.
//
// The controller's clients are built as pilot-discovery builds them (the
// shared client at 100/s, the status client from StatusRestConfig). Each
// iteration uses a new namespace; run with -benchtime=1x.
// GATEWAY_BENCH_ROUTES, GATEWAY_BENCH_QPS (status QPS and burst) and
// GATEWAY_BENCH_WORKERS change the figures' inputs; -short runs 100 routes.
func BenchmarkStatus1000Routes(b *testing.B) {
	env := kubetest.Start(b)
	crds := filepath.Join(fixtures.RepoRoot(b), "charts", "meshpilot", "crds", "gateway-api-standard.gen.yaml")
	if err := kubetest.InstallCRDs(b.Context(), env.Config(), crds); err != nil {
		b.Fatal(err)
	}
	qps, workers := envInt("GATEWAY_BENCH_QPS", 0), envInt("GATEWAY_BENCH_WORKERS", 0)
	shared := env.Config()
	shared.QPS, shared.Burst = 100, 200 // pilot/bootstrap's
	client, err := gwclient.NewForConfig(shared)
	if err != nil {
		b.Fatal(err)
	}
	statusClient, err := gwclient.NewForConfig(gateway.StatusRestConfig(shared, float64(qps), qps))
	if err != nil {
		b.Fatal(err)
	}
	// The bench's own client: creating and deleting are not what is
	// measured.
	own := env.Config()
	own.QPS, own.Burst = 5000, 5000
	bench, err := gwclient.NewForConfig(own)
	if err != nil {
		b.Fatal(err)
	}
	web := nt.KubeService("web", "default", "10.0.0.80", model.Port{Name: "http", Port: 8080})
	c, err := gateway.NewController(gateway.Options{
		QPS: float64(qps), Burst: qps, Workers: workers,
		Client: client, StatusClient: statusClient, Store: memory.New(), Service: serviceLookup([]*model.Service{web}),
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	go func() { _ = c.WriteStatus(ctx) }()
	v1 := bench.GatewayV1()
	if _, err := v1.GatewayClasses().Create(ctx, &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "istio"},
		Spec: gwv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := v1.Gateways("default").Create(ctx, routesInput(0).Gateways[0], metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	n := envInt("GATEWAY_BENCH_ROUTES", 1000)
	if testing.Short() {
		n = 100
	}
	clients := envInt("GATEWAY_BENCH_CLIENTS", 8)
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
		sw := followStatus(ctx, b, v1, ns)
		start := time.Now()
		inParallel(b, n, clients, func(j int) error {
			_, err := v1.HTTPRoutes(ns).Create(ctx, benchRoute(ns, fmt.Sprintf("r%d", j)), metav1.CreateOptions{})
			return err
		})
		created := time.Now()
		sw.wait(b, func() bool { return len(sw.accepted) == n && sw.attached == int32(n) })
		attached, accepted := sw.firstAttached(int32(n), created), sw.lastAccepted
		delStart := time.Now()
		inParallel(b, n, clients, func(j int) error {
			return v1.HTTPRoutes(ns).Delete(ctx, fmt.Sprintf("r%d", j), metav1.DeleteOptions{})
		})
		deleted := time.Now()
		sw.wait(b, func() bool { return sw.attached == 0 })
		b.ReportMetric(created.Sub(start).Seconds(), "create-s")
		b.ReportMetric(attached.Sub(created).Seconds(), "attached-s")
		b.ReportMetric(accepted.Sub(created).Seconds(), "accepted-s")
		b.ReportMetric(max(attached.Sub(start), accepted.Sub(start)).Seconds(), "status-s")
		b.ReportMetric(deleted.Sub(delStart).Seconds(), "delete-s")
		b.ReportMetric(sw.firstAttached(0, deleted).Sub(deleted).Seconds(), "teardown-s")
		b.ReportMetric(float64(sw.writes()), "gw-writes")
		sw.stop()
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// inParallel runs f(0..n-1) on clients goroutines and fails b on an error.
func inParallel(b *testing.B, n, clients int, f func(int) error) {
	b.Helper()
	jobs := make(chan int)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if err := f(j); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for j := range n {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// statusWatch follows, through the API server's watch, the bench
// Gateway's attachedRoutes and the status of one namespace's routes,
// stamping each event when it arrives.
type statusWatch struct {
	mu           sync.Mutex
	changed      chan struct{}
	accepted     map[string]bool
	lastAccepted time.Time
	attached     int32
	samples      []attachedSample // each Gateway event
	gwWrites     int              // the Gateway's updates
	last         string
	cancel       context.CancelFunc
	done         sync.WaitGroup
}

type attachedSample struct {
	at       time.Time
	attached int32
}

func followStatus(ctx context.Context, b *testing.B, v1 gwv1client.GatewayV1Interface, ns string) *statusWatch {
	ctx, cancel := context.WithCancel(ctx)
	sw := &statusWatch{changed: make(chan struct{}, 1), accepted: map[string]bool{}, attached: -1, cancel: cancel}
	follow := func(list func(context.Context) (watch.Interface, error), on func(watch.Event, time.Time)) {
		sw.done.Add(1)
		go func() {
			defer sw.done.Done()
			for ctx.Err() == nil {
				w, err := list(ctx)
				if err != nil {
					if ctx.Err() == nil {
						b.Errorf("watch: %v", err)
					}
					return
				}
				for ev := range w.ResultChan() {
					at := time.Now()
					sw.mu.Lock()
					on(ev, at)
					sw.mu.Unlock()
					select {
					case sw.changed <- struct{}{}:
					default:
					}
				}
				// The API server ended the watch: watch again (from
				// the cache's current objects).
				w.Stop()
			}
		}()
	}
	follow(func(ctx context.Context) (watch.Interface, error) {
		return v1.HTTPRoutes(ns).Watch(ctx, anyVersion)
	}, func(ev watch.Event, at time.Time) {
		r, ok := ev.Object.(*gwv1.HTTPRoute)
		if !ok || ev.Type == watch.Deleted {
			return
		}
		if sw.last = parentConditions(r); sw.last == "Accepted=True/Accepted ResolvedRefs=True/ResolvedRefs" && !sw.accepted[r.Name] {
			sw.accepted[r.Name] = true
			sw.lastAccepted = at
		}
	})
	follow(func(ctx context.Context) (watch.Interface, error) {
		return v1.Gateways("default").Watch(ctx, anyVersion)
	}, func(ev watch.Event, at time.Time) {
		g, ok := ev.Object.(*gwv1.Gateway)
		if !ok || g.Name != "gw" || len(g.Status.Listeners) == 0 {
			return
		}
		sw.attached = g.Status.Listeners[0].AttachedRoutes
		sw.samples = append(sw.samples, attachedSample{at, sw.attached})
		if ev.Type == watch.Modified {
			sw.gwWrites++
		}
	})
	return sw
}

// wait returns once ok holds (called with sw locked), failing b after two
// minutes.
func (sw *statusWatch) wait(b *testing.B, ok func() bool) {
	b.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		sw.mu.Lock()
		done, accepted, attached, last := ok(), len(sw.accepted), sw.attached, sw.last
		sw.mu.Unlock()
		if done {
			return
		}
		select {
		case <-sw.changed:
		case <-deadline:
			b.Fatalf("after 2 minutes: %d routes accepted, Gateway attachedRoutes %d (last route status: %s)", accepted, attached, last)
		}
	}
}

// firstAttached is when the Gateway's attachedRoutes first showed v after
// since: since itself when it already showed v then.
func (sw *statusWatch) firstAttached(v int32, since time.Time) time.Time {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	before := int32(-1)
	for _, s := range sw.samples {
		switch {
		case !s.at.After(since):
			before = s.attached
		case before == v:
			return since
		case s.attached == v:
			return s.at
		}
	}
	return since
}

func (sw *statusWatch) writes() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.gwWrites
}

func (sw *statusWatch) stop() {
	sw.cancel()
	sw.done.Wait()
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
