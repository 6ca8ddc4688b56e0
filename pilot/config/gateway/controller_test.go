package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// startController runs a controller and its status writer against a real
// API server with the chart's Gateway API CRDs; Service "web" (port 8080)
// of namespace default is the only backend that exists. configure may
// change the options first.
func startController(t *testing.T, configure ...func(*gateway.Options, *kubetest.Env)) (gwclient.Interface, *memory.Store, *kubetest.Env) {
	t.Helper()
	_, client, store, env := startControllerC(t, configure...)
	return client, store, env
}

// startControllerC is startController that also returns the controller.
func startControllerC(t *testing.T, configure ...func(*gateway.Options, *kubetest.Env)) (*gateway.Controller, gwclient.Interface, *memory.Store, *kubetest.Env) {
	t.Helper()
	env := kubetest.Start(t)
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "gateway-api-standard.gen.yaml")
	if err := kubetest.InstallCRDs(t.Context(), env.Config(), crds); err != nil {
		t.Fatalf("Gateway API CRDs: %v (run `make crds`)", err)
	}
	client, err := gwclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	web := nt.KubeService("web", "default", "10.0.0.80", model.Port{Name: "http", Port: 8080})
	store := memory.New()
	var logs testutil.Buffer
	opts := gateway.Options{
		Client: client, Store: store, Service: serviceLookup([]*model.Service{web}),
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	for _, f := range configure {
		f(&opts, env)
	}
	c, err := gateway.NewController(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 2)
	go func() { done <- c.Run(ctx) }()
	go func() { done <- c.WriteStatus(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("controller: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("controller logs:\n%s", logs.String())
		}
	})
	return c, client, store, env
}

// watchUntil watches objects of one kind until ok(obj) holds for the one
// named name, failing after a minute (a bound, not a wait for sync). A
// watch the API server ends (a CRD's watch cache still starting answers
// "Too large resource version") is started again.
func watchUntil[T any](t *testing.T, what string, w func(context.Context) (watch.Interface, error), name string, ok func(T) string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	last := "no event"
	for {
		wi, err := w(ctx)
		if err != nil {
			t.Fatalf("%s %s: watch: %v; last: %s", what, name, err, last)
		}
		if obj, done := watchEvents(ctx, wi, name, ok, &last); done {
			return obj
		}
		if ctx.Err() != nil {
			t.Fatalf("%s %s: condition not reached: %s", what, name, last)
		}
		// The server closed the watch after an error; retry after its delay.
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watchEvents reads wi until ok(obj) holds (true) or the watch ends.
func watchEvents[T any](ctx context.Context, wi watch.Interface, name string, ok func(T) string, last *string) (T, bool) {
	defer wi.Stop()
	var zero T
	for {
		select {
		case ev, open := <-wi.ResultChan():
			if !open {
				return zero, false
			}
			if ev.Type == watch.Error {
				*last = fmt.Sprintf("watch error: %v", ev.Object)
				continue
			}
			obj, isT := any(ev.Object).(T)
			m, isMeta := ev.Object.(metav1.Object)
			if !isT || !isMeta || m.GetName() != name {
				continue
			}
			if *last = ok(obj); *last == "" {
				return obj, true
			}
		case <-ctx.Done():
			return zero, false
		}
	}
}

// anyVersion starts a watch from the API server's watch cache with the
// current objects: a watch of the latest version waits for the cache of a
// CRD to catch up with etcd, which etcd 3.4 without progress notifications
// may not let it do ("Too large resource version").
var anyVersion = metav1.ListOptions{ResourceVersion: "0"}

// conditions renders conditions as "Type=Status/Reason" in order.
func conditions(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return strings.Join(out, " ")
}

// parentConditions renders an HTTPRoute's conditions from our controller.
func parentConditions(r *gwv1.HTTPRoute) string {
	var out []string
	for _, p := range r.Status.Parents {
		if p.ControllerName == gateway.ControllerName {
			out = append(out, conditions(p.Conditions))
		}
	}
	return strings.Join(out, "; ")
}

func want(got, want string) string {
	if got == want {
		return ""
	}
	return fmt.Sprintf("got %q, want %q", got, want)
}

func route(ns, name string, parent gwv1.ParentReference, backend string, backendNS *gwv1.Namespace) *gwv1.HTTPRoute {
	return &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{parent}},
			Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
				BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(backend), Namespace: backendNS, Port: ptr(gwv1.PortNumber(8080))},
			}}}}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// TestStatusOnAPIServer creates a GatewayClass, a Gateway with two
// listeners and three HTTPRoutes (one on each listener, the second with a
// backend that does not exist, and one from a namespace the first listener
// does not allow) on a real API server, and watches the status the leader
// writes; then checks the translated configs are in the store.
func TestStatusOnAPIServer(t *testing.T) {
	client, store, env := startController(t)
	ctx := t.Context()
	if _, err := env.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v1 := client.GatewayV1()
	createIstioClass(t, v1)
	all := gwv1.NamespacesFromAll
	if _, err := v1.Gateways("default").Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gw"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: []gwv1.Listener{
			{Name: "web", Port: 80, Protocol: gwv1.HTTPProtocolType, Hostname: ptr(gwv1.Hostname("*.example.com"))},
			{Name: "api", Port: 8080, Protocol: gwv1.HTTPProtocolType,
				AllowedRoutes: &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &all}}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	toWeb := gwv1.ParentReference{Name: "gw", Namespace: ptr(gwv1.Namespace("default")), SectionName: ptr(gwv1.SectionName("web"))}
	toAPI := gwv1.ParentReference{Name: "gw", Namespace: ptr(gwv1.Namespace("default")), SectionName: ptr(gwv1.SectionName("api"))}
	for _, r := range []*gwv1.HTTPRoute{
		route("default", "good", toWeb, "web", nil),
		route("default", "bad-backend", toAPI, "missing", nil),
		route("other", "not-allowed", toWeb, "web", ptr(gwv1.Namespace("default"))),
	} {
		if _, err := v1.HTTPRoutes(r.Namespace).Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	watchUntil(t, "GatewayClass", func(ctx context.Context) (watch.Interface, error) {
		return v1.GatewayClasses().Watch(ctx, anyVersion)
	}, "istio", func(gc *gwv1.GatewayClass) string {
		if len(gc.Status.SupportedFeatures) == 0 {
			return "no supportedFeatures"
		}
		return want(conditions(gc.Status.Conditions), "Accepted=True/Accepted")
	})
	routes := map[string]string{
		"default/good":        "Accepted=True/Accepted ResolvedRefs=True/ResolvedRefs",
		"default/bad-backend": "Accepted=True/Accepted ResolvedRefs=False/BackendNotFound",
		// Its backend is of another namespace and no ReferenceGrant allows it.
		"other/not-allowed": "Accepted=False/NotAllowedByListeners ResolvedRefs=False/RefNotPermitted",
	}
	for key, w := range routes {
		ns, name, _ := strings.Cut(key, "/")
		watchUntil(t, "HTTPRoute", func(ctx context.Context) (watch.Interface, error) {
			return v1.HTTPRoutes(ns).Watch(ctx, anyVersion)
		}, name, func(r *gwv1.HTTPRoute) string { return want(parentConditions(r), w) })
	}
	gw := watchUntil(t, "Gateway", func(ctx context.Context) (watch.Interface, error) {
		return v1.Gateways("default").Watch(ctx, anyVersion)
	}, "gw", func(g *gwv1.Gateway) string {
		var got []string
		for _, l := range g.Status.Listeners {
			got = append(got, fmt.Sprintf("%s:%d %s", l.Name, l.AttachedRoutes, conditions(l.Conditions)))
		}
		return want(strings.Join(got, "; "),
			"web:1 Accepted=True/Accepted Programmed=True/Programmed ResolvedRefs=True/ResolvedRefs Conflicted=False/NoConflicts; "+
				"api:1 Accepted=True/Accepted Programmed=True/Programmed ResolvedRefs=True/ResolvedRefs Conflicted=False/NoConflicts")
	})
	// No Service gw-istio: its address is not usable yet.
	if got := conditions(gw.Status.Conditions); got != "Accepted=True/Accepted Programmed=False/AddressNotUsable" {
		t.Errorf("Gateway conditions: %s", got)
	}
	for _, name := range []string{"gw-istio-autogenerated-k8s-gateway-web", "gw-istio-autogenerated-k8s-gateway-api"} {
		if _, ok := store.Get(model.KindGateway, "default", name); !ok {
			t.Errorf("store has no Istio Gateway default/%s", name)
		}
	}
	if n := len(store.List(model.KindVirtualService)); n != 2 {
		t.Errorf("store has %d VirtualServices, want 2 (one per attached route's listener and host)", n)
	}

	// A ReferenceGrant in default lets HTTPRoutes of other refer to its
	// Services: the route's reference resolves (its listener still does
	// not allow it).
	if _, err := client.GatewayV1().ReferenceGrants("default").Create(ctx, &gwv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "from-other"},
		Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gateway.Group, Kind: gateway.KindHTTPRoute, Namespace: "other"}},
			To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Service"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	watchUntil(t, "HTTPRoute", func(ctx context.Context) (watch.Interface, error) {
		return v1.HTTPRoutes("other").Watch(ctx, anyVersion)
	}, "not-allowed", func(r *gwv1.HTTPRoute) string {
		return want(parentConditions(r), "Accepted=False/NotAllowedByListeners ResolvedRefs=True/ResolvedRefs")
	})
}

// TestStatusWritesDoNotTranslate: the status writes of 20 routes, and
// another controller's write over one route's status, come back as
// updates that change no spec: they bring status passes (ours is written
// back beside the other controller's), never a translation.
func TestStatusWritesDoNotTranslate(t *testing.T) {
	c, client, _, _ := startControllerC(t)
	ctx := t.Context()
	v1 := client.GatewayV1()
	createIstioClass(t, v1)
	if _, err := v1.Gateways("default").Create(ctx, routesInput(0).Gateways[0], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if _, err := v1.HTTPRoutes("default").Create(ctx, benchRoute("default", fmt.Sprintf("r%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	accepted := "Accepted=True/Accepted ResolvedRefs=True/ResolvedRefs"
	for i := range n {
		watchUntil(t, "HTTPRoute", func(ctx context.Context) (watch.Interface, error) {
			return v1.HTTPRoutes("default").Watch(ctx, anyVersion)
		}, fmt.Sprintf("r%d", i), func(r *gwv1.HTTPRoute) string { return want(parentConditions(r), accepted) })
	}
	watchUntil(t, "Gateway", func(ctx context.Context) (watch.Interface, error) {
		return v1.Gateways("default").Watch(ctx, anyVersion)
	}, "gw", func(g *gwv1.Gateway) string {
		if len(g.Status.Listeners) != 1 || g.Status.Listeners[0].AttachedRoutes != n {
			return fmt.Sprintf("listeners %+v", g.Status.Listeners)
		}
		return ""
	})
	before := c.Translations()

	// Another controller replaces the status of r0 with its own parent.
	r0, err := v1.HTTPRoutes("default").Get(ctx, "r0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const other = "example.com/other-controller"
	r0.Status.Parents = []gwv1.RouteParentStatus{{
		ParentRef:      gwv1.ParentReference{Name: "other-gw"},
		ControllerName: other,
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted",
			LastTransitionTime: metav1.Now(), ObservedGeneration: r0.Generation}},
	}}
	if _, err := v1.HTTPRoutes("default").UpdateStatus(ctx, r0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	watchUntil(t, "HTTPRoute", func(ctx context.Context) (watch.Interface, error) {
		return v1.HTTPRoutes("default").Watch(ctx, anyVersion)
	}, "r0", func(r *gwv1.HTTPRoute) string {
		if len(r.Status.Parents) != 2 || r.Status.Parents[0].ControllerName != other {
			return fmt.Sprintf("parents %+v", r.Status.Parents)
		}
		return want(parentConditions(r), accepted)
	})
	if after := c.Translations(); after != before {
		t.Errorf("%d translations for status updates alone, want none", after-before)
	}
}

// createIstioClass creates GatewayClass istio of our controller.
func createIstioClass(t *testing.T, v1 gwv1client.GatewayV1Interface) {
	t.Helper()
	if _, err := v1.GatewayClasses().Create(t.Context(), &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "istio"},
		Spec:       gwv1.GatewayClassSpec{ControllerName: gateway.ControllerName},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestStatusWrittenOncePerVersion: 50 routes created together each get
// one status write and no conflict: a pass that runs before the informer
// shows a write made from some version of an object does not write that
// version again (it could only conflict).
func TestStatusWrittenOncePerVersion(t *testing.T) {
	var puts, conflicts atomic.Int64
	_, client, _, _ := startControllerC(t, func(o *gateway.Options, env *kubetest.Env) {
		cfg := gateway.StatusRestConfig(env.Config(), 0, 0)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/httproutes/") && strings.HasSuffix(r.URL.Path, "/status") {
					puts.Add(1)
					if err == nil && resp.StatusCode == http.StatusConflict {
						conflicts.Add(1)
					}
				}
				return resp, err
			})
		})
		sc, err := gwclient.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		o.StatusClient = sc
	})
	ctx := t.Context()
	v1 := client.GatewayV1()
	createIstioClass(t, v1)
	if _, err := v1.Gateways("default").Create(ctx, routesInput(0).Gateways[0], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	watchUntil(t, "Gateway", func(ctx context.Context) (watch.Interface, error) {
		return v1.Gateways("default").Watch(ctx, anyVersion)
	}, "gw", func(g *gwv1.Gateway) string {
		return want(conditions(g.Status.Conditions), "Accepted=True/Accepted Programmed=False/AddressNotUsable")
	})
	const n = 50
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := v1.HTTPRoutes("default").Create(ctx, benchRoute("default", fmt.Sprintf("r%d", i)), metav1.CreateOptions{}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i := range n {
		watchUntil(t, "HTTPRoute", func(ctx context.Context) (watch.Interface, error) {
			return v1.HTTPRoutes("default").Watch(ctx, anyVersion)
		}, fmt.Sprintf("r%d", i), func(r *gwv1.HTTPRoute) string {
			return want(parentConditions(r), "Accepted=True/Accepted ResolvedRefs=True/ResolvedRefs")
		})
	}
	if p, c := puts.Load(), conflicts.Load(); p != n || c != 0 {
		t.Errorf("%d route status writes (%d conflicts), want %d and none", p, c, n)
	}
}

// TestFailedStatusWriteRetried: a status write that fails (not a
// conflict) is made again by a later pass, from the same version of the
// route (the route names a listener its Gateway does not have, so nothing
// else about it changes). TestFailedWriteBringsPass covers the pass.
func TestFailedStatusWriteRetried(t *testing.T) {
	var puts atomic.Int64
	_, client, _, _ := startControllerC(t, func(o *gateway.Options, env *kubetest.Env) {
		cfg := gateway.StatusRestConfig(env.Config(), 0, 0)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/httproutes/lonely/status") && puts.Add(1) == 1 {
					body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","message":"injected","code":500}`
					return &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"application/json"}},
						Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
				}
				return rt.RoundTrip(r)
			})
		})
		sc, err := gwclient.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		o.StatusClient = sc
	})
	v1 := client.GatewayV1()
	createIstioClass(t, v1)
	if _, err := v1.Gateways("default").Create(t.Context(), routesInput(0).Gateways[0], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	watchUntil(t, "Gateway", func(ctx context.Context) (watch.Interface, error) {
		return v1.Gateways("default").Watch(ctx, anyVersion)
	}, "gw", func(g *gwv1.Gateway) string {
		return want(conditions(g.Status.Conditions), "Accepted=True/Accepted Programmed=False/AddressNotUsable")
	})
	r := benchRoute("default", "lonely")
	r.Spec.ParentRefs[0].SectionName = ptr(gwv1.SectionName("nope"))
	if _, err := v1.HTTPRoutes("default").Create(t.Context(), r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	watchUntil(t, "HTTPRoute", func(ctx context.Context) (watch.Interface, error) {
		return v1.HTTPRoutes("default").Watch(ctx, anyVersion)
	}, "lonely", func(r *gwv1.HTTPRoute) string {
		return want(parentConditions(r), "Accepted=False/NoMatchingParent ResolvedRefs=True/ResolvedRefs")
	})
	if n := puts.Load(); n != 2 {
		t.Errorf("%d status writes, want 2 (one failed, one retried)", n)
	}
}
