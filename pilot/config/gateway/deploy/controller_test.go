package deploy_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	"github.com/meshpilot/meshpilot/pilot/config/gateway/deploy"
)

var (
	env   *kubetest.Env
	nsSeq atomic.Int64 // namespaces are never finalized: one per run of a test
)

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

// passes records the controller's passes over each Gateway.
type passes struct {
	mu   sync.Mutex
	ch   chan struct{} // closed and replaced on every pass
	seen map[types.NamespacedName][]pass
}

type pass struct {
	changes []string
	err     error
	at      time.Time
}

func (p *passes) record(gw types.NamespacedName, changes []string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[gw] = append(p.seen[gw], pass{changes, err, time.Now()})
	close(p.ch)
	p.ch = make(chan struct{})
}

// waitPass waits for a pass over gw after the first `after` ones for which
// ok holds, and returns it.
func (p *passes) waitPass(t *testing.T, gw types.NamespacedName, after int, ok func(pass) bool) pass {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		p.mu.Lock()
		ps, ch := p.seen[gw], p.ch
		p.mu.Unlock()
		for _, ps := range ps[min(after, len(ps)):] {
			if ok(ps) {
				return ps
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("gateway %s: no such pass after %d; passes: %+v", gw, after, ps)
		}
	}
}

func (p *passes) count(gw types.NamespacedName) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seen[gw])
}

type fixture struct {
	kube   kubernetes.Interface
	gw     gwclient.Interface
	ns     string
	passes *passes
	logs   *testutil.Buffer
}

// setup installs the Gateway API CRDs and GatewayClasses "istio" (ours)
// and "other" (another controller) once, and makes a namespace for the
// test.
func setup(t testing.TB) *fixture {
	t.Helper()
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "gateway-api-standard.gen.yaml")
	if err := kubetest.InstallCRDs(t.Context(), env.Config(), crds); err != nil {
		t.Fatalf("Gateway API CRDs: %v (run `make crds`)", err)
	}
	gwc, err := gwclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	for name, ctrl := range map[string]gwv1.GatewayController{"istio": gateway.ControllerName, "other": "example.com/other"} {
		_, err := gwc.GatewayV1().GatewayClasses().Create(t.Context(), &gwv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: gwv1.GatewayClassSpec{ControllerName: ctrl},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	kube := env.Clientset()
	ns := fmt.Sprintf("%s-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), nsSeq.Add(1))
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &fixture{kube: kube, gw: gwc, ns: ns, passes: &passes{ch: make(chan struct{}), seen: map[types.NamespacedName][]pass{}}, logs: &testutil.Buffer{}}
}

// start is setup, and a controller running until the test ends.
func start(t *testing.T) *fixture {
	t.Helper()
	f := setup(t)
	opts := f.shared(t)
	opts.Reconciled, opts.MinBackoff, opts.MaxBackoff = f.passes.record, 50*time.Millisecond, time.Second
	// Each test's namespace stands for the control plane's (class
	// defaults ConfigMaps).
	opts.SystemNamespace = f.ns
	opts.Log = slog.New(slog.NewTextHandler(f.logs, nil))
	c, err := deploy.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("controller logs:\n%s", f.logs.String())
		}
	})
	return f
}

// shared starts Gateway, GatewayClass and (when served) ListenerSet
// informers until the test ends, as the translation controller does for
// the controller it shares them with, and returns Options with them, the
// Kube client and a metadata client.
func (f *fixture) shared(tb testing.TB) deploy.Options {
	tb.Helper()
	factory := gwinformers.NewSharedInformerFactory(f.gw, 0)
	v1 := factory.Gateway().V1()
	opts := deploy.Options{Kube: f.kube, Gateways: v1.Gateways(), Classes: v1.GatewayClasses()}
	opts.Gateways.Informer()
	opts.Classes.Informer()
	if deploy.ListenerSetServed(f.gw) {
		opts.ListenerSets = v1.ListenerSets()
		opts.ListenerSets.Informer()
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	tb.Cleanup(func() { cancel(); factory.Shutdown() })
	meta, err := metadata.NewForConfig(env.Config())
	if err != nil {
		tb.Fatal(err)
	}
	opts.Metadata = meta
	return opts
}

func (f *fixture) createGateway(t *testing.T, gw *gwv1.Gateway) *gwv1.Gateway {
	t.Helper()
	gw.Namespace = f.ns
	out, err := f.gw.GatewayV1().Gateways(f.ns).Create(t.Context(), gw, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitFor watches one object until ok (nil: deleted) returns "", failing
// with its last answer after a minute.
func waitFor[T any](t *testing.T, what string, list func(context.Context) (T, error), w func(context.Context, string) (watch.Interface, error), ok func(T) string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	last := ""
	for ctx.Err() == nil {
		// Current state first, then the changes from its resourceVersion.
		cur, err := list(ctx)
		var rv string
		switch {
		case err == nil:
			if last = ok(cur); last == "" {
				return cur
			}
			rv = any(cur).(metav1.Object).GetResourceVersion()
		case apierrors.IsNotFound(err):
			var zero T
			if last = ok(zero); last == "" {
				return zero
			}
		default:
			last = err.Error()
		}
		wi, err := w(ctx, rv)
		if err != nil {
			continue
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				break
			}
			obj, _ := ev.Object.(T)
			if ev.Type == watch.Deleted {
				var zero T
				obj = zero
			}
			if last = ok(obj); last == "" {
				wi.Stop()
				return obj
			}
		}
		wi.Stop()
	}
	t.Fatalf("%s: %s", what, last)
	var zero T
	return zero
}

func fieldSelector(name string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: "metadata.name=" + name}
}

func (f *fixture) service(t *testing.T, name string, ok func(*corev1.Service) string) *corev1.Service {
	t.Helper()
	c := f.kube.CoreV1().Services(f.ns)
	return waitFor(t, "Service "+name,
		func(ctx context.Context) (*corev1.Service, error) { return c.Get(ctx, name, metav1.GetOptions{}) },
		func(ctx context.Context, rv string) (watch.Interface, error) {
			o := fieldSelector(name)
			o.ResourceVersion = rv
			return c.Watch(ctx, o)
		}, ok)
}

func (f *fixture) deployment(t *testing.T, name string, ok func(*appsv1.Deployment) string) *appsv1.Deployment {
	t.Helper()
	c := f.kube.AppsV1().Deployments(f.ns)
	return waitFor(t, "Deployment "+name,
		func(ctx context.Context) (*appsv1.Deployment, error) { return c.Get(ctx, name, metav1.GetOptions{}) },
		func(ctx context.Context, rv string) (watch.Interface, error) {
			o := fieldSelector(name)
			o.ResourceVersion = rv
			return c.Watch(ctx, o)
		}, ok)
}

func (f *fixture) serviceAccount(t *testing.T, name string, ok func(*corev1.ServiceAccount) string) *corev1.ServiceAccount {
	t.Helper()
	c := f.kube.CoreV1().ServiceAccounts(f.ns)
	return waitFor(t, "ServiceAccount "+name,
		func(ctx context.Context) (*corev1.ServiceAccount, error) {
			return c.Get(ctx, name, metav1.GetOptions{})
		},
		func(ctx context.Context, rv string) (watch.Interface, error) {
			o := fieldSelector(name)
			o.ResourceVersion = rv
			return c.Watch(ctx, o)
		}, ok)
}

func exists[T any](o *T) string {
	if o == nil {
		return "not created"
	}
	return ""
}

func gone[T any](o *T) string {
	if o != nil {
		return "still exists"
	}
	return ""
}

func ports(svc *corev1.Service) []string {
	var out []string
	for _, p := range svc.Spec.Ports {
		out = append(out, fmt.Sprintf("%s:%d", p.Name, p.Port))
	}
	return out
}

// TestGatewayLifecycle: a Gateway gets its ServiceAccount, Deployment and
// Service with istiod's names, labels and owner; a listener's new port
// reaches the Service; a Deployment deleted by hand comes back; deleting
// the Gateway deletes them (the test API server has no garbage collector).
func TestGatewayLifecycle(t *testing.T) {
	f := start(t)
	gw := f.createGateway(t, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{deploy.ServiceTypeAnnotation: "ClusterIP"}},
		Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: []gwv1.Listener{
			{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
		}},
	})
	owned := func(m metav1.Object) string {
		refs := m.GetOwnerReferences()
		if len(refs) != 1 || refs[0].Kind != "Gateway" || refs[0].UID != gw.UID {
			return fmt.Sprintf("owner references %v", refs)
		}
		l := m.GetLabels()
		if l[deploy.GatewayNameLabel] != "web" || l[deploy.IstioGatewayNameLabel] != "web" || l[deploy.ManagedLabel] != deploy.ManagedValue {
			return fmt.Sprintf("labels %v", l)
		}
		for _, mf := range m.GetManagedFields() {
			if mf.Manager == deploy.FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply {
				return ""
			}
		}
		return "not applied by " + deploy.FieldManager
	}
	f.serviceAccount(t, "web-istio", func(sa *corev1.ServiceAccount) string {
		if sa == nil {
			return "not created"
		}
		return owned(sa)
	})
	dep := f.deployment(t, "web-istio", func(d *appsv1.Deployment) string {
		if d == nil {
			return "not created"
		}
		if s := owned(d); s != "" {
			return s
		}
		tm := d.Spec.Template
		if tm.Annotations["inject.istio.io/templates"] != "gateway" || tm.Labels["sidecar.istio.io/inject"] != "true" || tm.Spec.ServiceAccountName != "web-istio" {
			return fmt.Sprintf("pod template %v %v %s", tm.Labels, tm.Annotations, tm.Spec.ServiceAccountName)
		}
		return ""
	})
	f.service(t, "web-istio", func(s *corev1.Service) string {
		if s == nil {
			return "not created"
		}
		if o := owned(s); o != "" {
			return o
		}
		if s.Spec.Type != corev1.ServiceTypeClusterIP || !slices.Equal(ports(s), []string{"status-port:15021", "http:80"}) ||
			s.Spec.Selector[deploy.GatewayNameLabel] != "web" {
			return fmt.Sprintf("type %s ports %v selector %v", s.Spec.Type, ports(s), s.Spec.Selector)
		}
		return ""
	})

	// Nothing changes when nothing needs to: an annotation that is not
	// copied makes a pass that applies nothing.
	key := types.NamespacedName{Namespace: f.ns, Name: "web"}
	// (The watch may see the Service before the pass that applied it ends.)
	f.passes.waitPass(t, key, 0, func(p pass) bool { return len(p.changes) > 0 })
	n := f.passes.count(key)
	gw = f.updateGateway(t, "web", func(g *gwv1.Gateway) { g.Annotations[deploy.ControllerVersionAnnotation] = "5" })
	if p := f.passes.waitPass(t, key, n, func(pass) bool { return true }); len(p.changes) > 0 || p.err != nil {
		t.Errorf("unchanged Gateway: changes %v, error %v", p.changes, p.err)
	}

	// A new listener port.
	gw = f.updateGateway(t, "web", func(g *gwv1.Gateway) { g.Spec.Listeners[0].Port = 8080 })
	f.service(t, "web-istio", func(s *corev1.Service) string {
		if s == nil || !slices.Equal(ports(s), []string{"status-port:15021", "http:8080"}) {
			return fmt.Sprintf("ports %v", ports(s))
		}
		return ""
	})

	// Deleted by hand: made again.
	if err := f.kube.AppsV1().Deployments(f.ns).Delete(t.Context(), "web-istio", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.deployment(t, "web-istio", func(d *appsv1.Deployment) string {
		if d == nil || d.UID == dep.UID {
			return "not made again"
		}
		return ""
	})

	if err := f.gw.GatewayV1().Gateways(f.ns).Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.serviceAccount(t, "web-istio", gone)
	f.deployment(t, "web-istio", gone)
	f.service(t, "web-istio", gone)
}

func (f *fixture) updateGateway(t *testing.T, name string, mutate func(*gwv1.Gateway)) *gwv1.Gateway {
	t.Helper()
	c := f.gw.GatewayV1().Gateways(f.ns)
	for {
		gw, err := c.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if gw.Annotations == nil {
			gw.Annotations = map[string]string{}
		}
		mutate(gw)
		out, err := c.Update(t.Context(), gw, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// TestNothingCreated: a manually deployed Gateway (its address a
// hostname), a Gateway of another controller's class and a Gateway whose
// name is taken by a Service not ours get nothing, and do not stop a
// Gateway created after them from being deployed.
func TestNothingCreated(t *testing.T) {
	f := start(t)
	hostname := gwv1.HostnameAddressType
	listeners := []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}
	if _, err := f.kube.CoreV1().Services(f.ns).Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "taken-istio"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "x", Port: 1}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.createGateway(t, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "manual"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: listeners,
			Addresses: []gwv1.GatewaySpecAddress{{Type: &hostname, Value: "ingress.istio-system.svc.cluster.local"}}},
	})
	f.createGateway(t, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign"},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "other", Listeners: listeners},
	})
	f.createGateway(t, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "taken"},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: listeners},
	})
	f.createGateway(t, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "later"},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: listeners},
	})
	f.service(t, "later-istio", exists)
	for _, name := range []string{"manual", "foreign"} {
		p := f.passes.waitPass(t, types.NamespacedName{Namespace: f.ns, Name: name}, 0, func(pass) bool { return true })
		if len(p.changes) > 0 || p.err != nil {
			t.Errorf("%s: changes %v, error %v", name, p.changes, p.err)
		}
	}
	p := f.passes.waitPass(t, types.NamespacedName{Namespace: f.ns, Name: "taken"}, 0, func(p pass) bool { return p.err != nil })
	if !strings.Contains(p.err.Error(), "not managed") {
		t.Errorf("taken: error %v", p.err)
	}
	svc, err := f.kube.CoreV1().Services(f.ns).Get(t.Context(), "taken-istio", metav1.GetOptions{})
	if err != nil || len(svc.OwnerReferences) > 0 || svc.Labels[deploy.ManagedLabel] != "" {
		t.Errorf("taken-istio was changed: %v %+v", err, svc.ObjectMeta)
	}
	for _, name := range []string{"manual-istio", "foreign-other"} {
		if _, err := f.kube.AppsV1().Deployments(f.ns).Get(t.Context(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Deployment %s: %v, want not found", name, err)
		}
	}
	deps, err := f.kube.AppsV1().Deployments(f.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range deps.Items {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"later-istio"}) {
		t.Errorf("Deployments %v, want only later-istio", names)
	}
	// Logged once, though retried never (a permanent refusal).
	if n := strings.Count(f.logs.String(), `msg="gateway not deployed" gateway=`+f.ns+"/taken "); n != 1 {
		t.Errorf("%d log lines for the refused Gateway, want 1:\n%s", n, f.logs.String())
	}
}

// TestBecomesManual: a deployed Gateway whose spec.addresses becomes a
// hostname loses the objects made for it.
func TestBecomesManual(t *testing.T) {
	f := start(t)
	f.createGateway(t, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "edge"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: []gwv1.Listener{
			{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
		}},
	})
	f.deployment(t, "edge-istio", exists)
	hostname := gwv1.HostnameAddressType
	f.updateGateway(t, "edge", func(g *gwv1.Gateway) {
		g.Spec.Addresses = []gwv1.GatewaySpecAddress{{Type: &hostname, Value: "ingress.example"}}
	})
	f.deployment(t, "edge-istio", gone)
	f.service(t, "edge-istio", gone)
	f.serviceAccount(t, "edge-istio", gone)
}

func (f *fixture) hpa(t *testing.T, name string, ok func(*autoscalingv2.HorizontalPodAutoscaler) string) {
	t.Helper()
	c := f.kube.AutoscalingV2().HorizontalPodAutoscalers(f.ns)
	waitFor(t, "HorizontalPodAutoscaler "+name,
		func(ctx context.Context) (*autoscalingv2.HorizontalPodAutoscaler, error) {
			return c.Get(ctx, name, metav1.GetOptions{})
		},
		func(ctx context.Context, rv string) (watch.Interface, error) {
			o := fieldSelector(name)
			o.ResourceVersion = rv
			return c.Watch(ctx, o)
		}, ok)
}

func (f *fixture) pdb(t *testing.T, name string, ok func(*policyv1.PodDisruptionBudget) string) {
	t.Helper()
	c := f.kube.PolicyV1().PodDisruptionBudgets(f.ns)
	waitFor(t, "PodDisruptionBudget "+name,
		func(ctx context.Context) (*policyv1.PodDisruptionBudget, error) {
			return c.Get(ctx, name, metav1.GetOptions{})
		},
		func(ctx context.Context, rv string) (watch.Interface, error) {
			o := fieldSelector(name)
			o.ResourceVersion = rv
			return c.Watch(ctx, o)
		}, ok)
}

// TestParameters: the horizontalPodAutoscaler and podDisruptionBudget keys
// of a parametersRef ConfigMap make an HPA and a PDB; a change of the
// ConfigMap changes them, a key removed removes its object, both without
// a change of the Gateway's; deleting the Gateway deletes them.
func TestParameters(t *testing.T) {
	f := start(t)
	cm, err := f.kube.CoreV1().ConfigMaps(f.ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "gw-params"},
		Data: map[string]string{
			deploy.OverlayHPA: "spec:\n  minReplicas: 2\n  maxReplicas: 4\n",
			deploy.OverlayPDB: "spec:\n  minAvailable: 1\n",
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.createGateway(t, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "scaled"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "istio",
			Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
			Infrastructure: &gwv1.GatewayInfrastructure{
				ParametersRef: &gwv1.LocalParametersReference{Kind: "ConfigMap", Name: "gw-params"},
			}},
	})
	f.hpa(t, "scaled-istio", func(h *autoscalingv2.HorizontalPodAutoscaler) string {
		if h == nil || h.Spec.MaxReplicas != 4 || h.Spec.MinReplicas == nil || *h.Spec.MinReplicas != 2 || h.Spec.ScaleTargetRef.Name != "scaled-istio" {
			return fmt.Sprintf("%+v", h)
		}
		return ""
	})
	f.pdb(t, "scaled-istio", func(p *policyv1.PodDisruptionBudget) string {
		if p == nil || p.Spec.MinAvailable == nil || p.Spec.MinAvailable.IntValue() != 1 {
			return fmt.Sprintf("%+v", p)
		}
		return ""
	})
	// The ConfigMap is watched (its metadata): a change reaches the
	// objects at once, with no change of the Gateway's (the periodic
	// resync is 5 minutes away).
	cm.Data[deploy.OverlayHPA] = "spec:\n  minReplicas: 3\n  maxReplicas: 7\n"
	delete(cm.Data, deploy.OverlayPDB)
	if _, err := f.kube.CoreV1().ConfigMaps(f.ns).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.hpa(t, "scaled-istio", func(h *autoscalingv2.HorizontalPodAutoscaler) string {
		if h == nil || h.Spec.MaxReplicas != 7 || h.Spec.MinReplicas == nil || *h.Spec.MinReplicas != 3 {
			return fmt.Sprintf("%+v", h)
		}
		return ""
	})
	f.pdb(t, "scaled-istio", gone)
	if err := f.gw.GatewayV1().Gateways(f.ns).Delete(t.Context(), "scaled", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.hpa(t, "scaled-istio", gone)
	f.deployment(t, "scaled-istio", gone)
}

// TestParametersCreatedLater: a Gateway whose parametersRef ConfigMap does
// not exist is not deployed; creating the ConfigMap deploys it (the
// ConfigMap watch, not the 5-minute resync).
func TestParametersCreatedLater(t *testing.T) {
	f := start(t)
	key := types.NamespacedName{Namespace: f.ns, Name: "later"}
	f.createGateway(t, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "later"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "istio",
			Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
			Infrastructure: &gwv1.GatewayInfrastructure{
				ParametersRef: &gwv1.LocalParametersReference{Kind: "ConfigMap", Name: "later-params"},
			}},
	})
	f.passes.waitPass(t, key, 0, func(p pass) bool { return p.err != nil && strings.Contains(p.err.Error(), "not found") })
	// Another ConfigMap of the namespace, then the one named.
	for _, name := range []string{"unrelated", "later-params"} {
		if _, err := f.kube.CoreV1().ConfigMaps(f.ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Data:       map[string]string{deploy.OverlayHPA: "spec:\n  maxReplicas: 2\n"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.hpa(t, "later-istio", func(h *autoscalingv2.HorizontalPodAutoscaler) string {
		if h == nil || h.Spec.MaxReplicas != 2 {
			return fmt.Sprintf("%+v", h)
		}
		return ""
	})
	f.deployment(t, "later-istio", func(d *appsv1.Deployment) string {
		if d == nil {
			return "no Deployment"
		}
		return ""
	})
}

// TestClassDefaults: a ConfigMap of the system namespace labelled
// gateway.istio.io/defaults-for-class=istio patches the objects of every
// Gateway of the class, under a Gateway's own parametersRef, as istiod
// layers them; its changes and its deletion are watched.
func TestClassDefaults(t *testing.T) {
	f := start(t)
	cms := f.kube.CoreV1().ConfigMaps(f.ns)
	defaults, err := cms.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-defaults", Labels: map[string]string{deploy.ClassDefaultsLabel: "istio"}},
		Data: map[string]string{
			deploy.OverlayHPA: "spec:\n  minReplicas: 2\n  maxReplicas: 5\n",
			deploy.OverlayPDB: "spec:\n  minAvailable: 1\n",
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Defaults of another class, and an unlabelled ConfigMap: not used.
	for name, labels := range map[string]map[string]string{"other-defaults": {deploy.ClassDefaultsLabel: "other"}, "plain": nil} {
		if _, err := cms.Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Data:       map[string]string{deploy.OverlayHPA: "spec:\n  maxReplicas: 99\n"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cms.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "own-params"},
		Data:       map[string]string{deploy.OverlayHPA: "spec:\n  maxReplicas: 9\n"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	listeners := []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}
	f.createGateway(t, &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "dflt"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: listeners}})
	f.createGateway(t, &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "own"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: listeners,
			Infrastructure: &gwv1.GatewayInfrastructure{ParametersRef: &gwv1.LocalParametersReference{Kind: "ConfigMap", Name: "own-params"}}}})
	replicas := func(minR, maxR int32) func(*autoscalingv2.HorizontalPodAutoscaler) string {
		return func(h *autoscalingv2.HorizontalPodAutoscaler) string {
			if h == nil || h.Spec.MaxReplicas != maxR || h.Spec.MinReplicas == nil || *h.Spec.MinReplicas != minR {
				return fmt.Sprintf("want %d-%d replicas: %+v", minR, maxR, h)
			}
			return ""
		}
	}
	f.hpa(t, "dflt-istio", replicas(2, 5))
	f.pdb(t, "dflt-istio", exists)
	// The Gateway's own parameters win over the class's.
	f.hpa(t, "own-istio", replicas(2, 9))
	f.pdb(t, "own-istio", exists)

	defaults.Data[deploy.OverlayHPA] = "spec:\n  minReplicas: 3\n  maxReplicas: 6\n"
	if _, err := cms.Update(t.Context(), defaults, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.hpa(t, "dflt-istio", replicas(3, 6))
	f.hpa(t, "own-istio", replicas(3, 9))

	if err := cms.Delete(t.Context(), "istio-defaults", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.hpa(t, "dflt-istio", gone)
	f.pdb(t, "dflt-istio", gone)
	f.pdb(t, "own-istio", gone)
	f.hpa(t, "own-istio", replicas(1, 9))
}
