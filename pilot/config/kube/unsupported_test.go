package kube

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	typev1beta1 "istio.io/api/type/v1beta1"
	extensionsv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
)

// gaugeValue is a float the controller sets from its informer goroutines.
type gaugeValue struct {
	mu sync.Mutex
	v  float64
}

func (g *gaugeValue) set(v float64) { g.mu.Lock(); g.v = v; g.mu.Unlock() }
func (g *gaugeValue) get() float64  { g.mu.Lock(); defer g.mu.Unlock(); return g.v }

// TestControllerWarnsUnsupportedFields applies a VirtualService with a tcp
// route to a real API server and expects one warning per resourceVersion
// naming the object and field, and the count to follow create and delete.
func TestControllerWarnsUnsupportedFields(t *testing.T) {
	env := kubetest.Start(t)
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "customresourcedefinitions.gen.yaml")
	if err := kubetest.InstallCRDs(t.Context(), env.Config(), crds); err != nil {
		t.Fatalf("Istio CRDs: %v (run `make crds`)", err)
	}
	ic, err := istioclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	mc, err := metadata.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	gauge := &gaugeValue{}
	c, err := New(Options{Istio: ic, Metadata: mc, Store: memory.New(), SetUnsupportedFields: gauge.set,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	const ns = "unsupported"
	if _, err := env.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "mongo", Namespace: ns},
		Spec: networking.VirtualService{Hosts: []string{"mongo"},
			Tcp: []*networking.TCPRoute{{Match: []*networking.L4MatchAttributes{{SourceSubnet: "10.0.0.0/8"}},
				Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "mongo"}}}}}}}
	created, err := ic.NetworkingV1().VirtualServices(ns).Create(ctx, vs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const line = `msg="config field not applied" kind=VirtualService namespace=unsupported name=mongo field=spec.tcp[0].match[0].sourceSubnet`
	testutil.Eventually(t, 10*time.Second, "warning for spec.tcp and gauge 1", func() bool {
		return strings.Contains(logs.String(), line) && gauge.get() == 1
	})

	// A new resourceVersion is reported again, with both fields now set.
	created.Spec.Http = []*networking.HTTPRoute{{
		Fault: &networking.HTTPFaultInjection{Abort: &networking.HTTPFaultInjection_Abort{
			ErrorType: &networking.HTTPFaultInjection_Abort_Http2Error{Http2Error: "REFUSED_STREAM"},
		}},
		Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "mongo"}}},
	}}
	if _, err := ic.NetworkingV1().VirtualServices(ns).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "second warning for spec.tcp and gauge 2", func() bool {
		return strings.Count(logs.String(), line) == 2 && gauge.get() == 2
	})

	if err := ic.NetworkingV1().VirtualServices(ns).Delete(ctx, "mongo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "gauge 0 after delete", func() bool { return gauge.get() == 0 })
	if n := strings.Count(logs.String(), line); n != 2 {
		t.Errorf("%d warnings for spec.tcp, want 2 (one per resourceVersion):\n%s", n, logs.String())
	}

	// A kind no generator reads is watched all the same: its object is
	// named in a warning, not ignored in silence.
	te := &extensionsv1alpha1.TrafficExtension{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: ns},
		Spec: extensions.TrafficExtension{
			Selector:     &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "x"}},
			FilterConfig: &extensions.TrafficExtension_Lua{Lua: &extensions.LuaConfig{InlineCode: "function envoy_on_request(h) end"}},
		}}
	if _, err := ic.ExtensionsV1alpha1().TrafficExtensions(ns).Create(ctx, te, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its two fields set (the CRD requires wasm or lua) are both named.
	const teLine = `msg="config field not applied" kind=TrafficExtension namespace=unsupported name=ext field=spec.`
	testutil.Eventually(t, 10*time.Second, "warnings for the TrafficExtension", func() bool {
		return strings.Contains(logs.String(), teLine+"selector") && strings.Contains(logs.String(), teLine+"lua") && gauge.get() == 2
	})
}
