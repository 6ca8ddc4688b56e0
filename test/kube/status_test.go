package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networkingapi "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	configkube "github.com/meshpilot/meshpilot/pilot/config/kube"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// Status writer rate in this test: the bound on writes is derived from it.
const (
	statusQPS   = 4
	statusBurst = 2
)

// TestConfigStatusOnAPIServer: a VirtualService reaching 50 connected
// proxies gets Reconciled "applied by 50 of 50" at its generation; 5
// proxies NACKing generation 2 show as 5 rejections with their message; a
// generation bump starts the count again; disconnected proxies drop out;
// 200 changes cost a number of status writes bounded by the writer's rate;
// deleting the object leaves nothing to write.
func TestConfigStatusOnAPIServer(t *testing.T) {
	const proxies, nacking = 50, 5
	env := kubetest.Start(t)
	a := newApplier(t, env)
	installCRDs(t, env, a)
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "default"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
	}
	if _, err := env.Clientset().CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv, logs := startKubeServer(t, env, func(o *bootstrap.Options) {
		o.WriteStatus, o.StatusQPS, o.StatusBurst = true, statusQPS, statusBurst
	})
	ic, err := istioclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	vsClient := ic.NetworkingV1().VirtualServices("default")

	// 50 proxies; the first 5 reject any route config naming header x-bad.
	var stops []func()
	var clients []*adsc.Client
	for i := range proxies {
		cfg := adsc.Config{Node: bootstraptest.SidecarNode(t, fmt.Sprintf("client-%d", i), "default", fmt.Sprintf("10.1.0.%d", i+1), map[string]string{"app": "client"})}
		if i < nacking {
			cfg.NACK = func(typeURL string, res map[string]*anypb.Any) error {
				for name, r := range res {
					if typeURL == model.RouteType && bytes.Contains(r.GetValue(), []byte("x-bad")) {
						return fmt.Errorf("route %s: header x-bad not allowed here", name)
					}
				}
				return nil
			}
		}
		c, stop := runStoppableClient(t, srv, cfg)
		clients, stops = append(clients, c), append(stops, stop)
	}
	for _, c := range clients {
		bootstraptest.WaitClient(t, c, "initial config", func(c *adsc.Client) bool {
			_, ok := c.Resources(model.RouteType)["9080"]
			return c.HasAll() && ok
		})
	}

	vs := &networkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "default"},
		Spec: networkingapi.VirtualService{
			Hosts: []string{"reviews"},
			Http: []*networkingapi.HTTPRoute{{
				Timeout: durationpb.New(5 * time.Second),
				Route:   []*networkingapi.HTTPRouteDestination{{Destination: &networkingapi.Destination{Host: "reviews"}}},
			}},
		},
	}
	created, err := vsClient.Create(ctx, vs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, vsClient, created.Generation, "True", "applied by 50 of 50 affected proxies")

	// Generation 2 names header x-bad: 5 proxies reject it.
	gen2 := updateVS(t, vsClient, func(s *networkingapi.VirtualService) {
		s.Http[0].Match = []*networkingapi.HTTPMatchRequest{{Headers: map[string]*networkingapi.StringMatch{
			"x-bad": {MatchType: &networkingapi.StringMatch_Exact{Exact: "1"}},
		}}}
	})
	cond := waitReconciled(t, vsClient, gen2, "False", "applied by 45 of 50 affected proxies; 5 rejected: ")
	if !strings.Contains(cond.GetMessage(), "header x-bad not allowed here") || cond.GetReason() != "Rejected" {
		t.Fatalf("Reconciled = %+v, want the proxies' message and reason Rejected", cond)
	}
	st, _ := srv.Discovery().ConfigStatus().Status(model.ConfigKey{Kind: model.KindVirtualService, Namespace: "default", Name: "reviews"})
	if st.Rejected != nacking || len(st.Rejections) != nacking {
		t.Fatalf("tracker: %d rejected, %d messages; want %d", st.Rejected, len(st.Rejections), nacking)
	}
	if v := bootstraptest.MetricValue(t, srv, "meshpilot_config_rejected", `kind="VirtualService"`, `name="reviews"`, `namespace="default"`); v != nacking {
		t.Fatalf("meshpilot_config_rejected = %v, want %d", v, nacking)
	}

	// Generation 3 drops the header: the count starts again and all apply.
	gen3 := updateVS(t, vsClient, func(s *networkingapi.VirtualService) { s.Http[0].Match = nil })
	waitReconciled(t, vsClient, gen3, "True", "applied by 50 of 50 affected proxies")

	// 10 proxies leave: they drop out of the counts.
	for _, stop := range stops[:10] {
		stop()
	}
	waitReconciled(t, vsClient, gen3, "True", "applied by 40 of 40 affected proxies")

	// A burst of 200 changes: count the status writes (updates that keep
	// the generation and change the status) with a watch.
	cur, err := vsClient.Get(ctx, "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := vsClient.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=reviews", ResourceVersion: cur.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var writesMu sync.Mutex
	writes := 0
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		prev := cur
		for ev := range w.ResultChan() {
			obj, ok := ev.Object.(*networkingv1.VirtualService)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			if obj.Generation == prev.Generation && obj.Status.String() != prev.Status.String() {
				writesMu.Lock()
				writes++
				writesMu.Unlock()
			}
			prev = obj
		}
	}()
	burstStart := time.Now()
	var last int64
	for i := range 200 {
		last = updateVS(t, vsClient, func(s *networkingapi.VirtualService) {
			s.Http[0].Timeout = durationpb.New(time.Duration(i+6) * time.Second)
		})
	}
	waitReconciled(t, vsClient, last, "True", "applied by 40 of 40 affected proxies")
	elapsed := time.Since(burstStart)
	writesMu.Lock()
	n := writes
	writesMu.Unlock()
	// Each write takes a token: at most the burst plus what refilled.
	bound := statusBurst + int(statusQPS*elapsed.Seconds()) + 1
	t.Logf("200 changes in %v: %d status writes (bound %d)", elapsed.Round(time.Millisecond), n, bound)
	if n == 0 || n > bound {
		t.Fatalf("%d status writes for 200 changes over %v, want 1..%d (rate %v/s, burst %d)", n, elapsed, bound, statusQPS, statusBurst)
	}

	// Deleted: the status goes from the tracker; nothing is written for it.
	if err := vsClient.Delete(ctx, "reviews", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "status dropped", func() error {
		if _, ok := srv.Discovery().ConfigStatus().Status(model.ConfigKey{Kind: model.KindVirtualService, Namespace: "default", Name: "reviews"}); ok {
			return errNotYet
		}
		return nil
	})
	w.Stop()
	<-watched
	if strings.Contains(logs.String(), "writing config status failed") {
		t.Fatalf("status writer failed:\n%s", logs.String())
	}
}

// runStoppableClient runs an ADS client on srv until stop or the test's end.
func runStoppableClient(t *testing.T, srv *bootstrap.Server, cfg adsc.Config) (*adsc.Client, func()) {
	c := adsc.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	conn := bootstraptest.Dial(t, srv.GRPCListenAddr())
	go func() { defer close(done); _ = c.Run(ctx, conn) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return c, stop
}

// updateVS changes the spec of VirtualService default/reviews and returns its new generation.
func updateVS(t *testing.T, c interface {
	Get(context.Context, string, metav1.GetOptions) (*networkingv1.VirtualService, error)
	Update(context.Context, *networkingv1.VirtualService, metav1.UpdateOptions) (*networkingv1.VirtualService, error)
}, change func(*networkingapi.VirtualService)) int64 {
	t.Helper()
	var gen int64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.Get(context.Background(), "reviews", metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(&cur.Spec)
		out, err := c.Update(context.Background(), cur, metav1.UpdateOptions{})
		if err == nil {
			gen = out.Generation
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

// waitReconciled waits until default/reviews has observedGeneration gen and
// a Reconciled condition of status whose message starts with msg.
func waitReconciled(t *testing.T, c interface {
	Get(context.Context, string, metav1.GetOptions) (*networkingv1.VirtualService, error)
}, gen int64, status, msg string) *metav1alpha1.IstioCondition {
	t.Helper()
	var got *metav1alpha1.IstioCondition
	waitUntil(t, fmt.Sprintf("Reconciled=%s %q at generation %d", status, msg, gen), func() error {
		vs, err := c.Get(context.Background(), "reviews", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if vs.Status.GetObservedGeneration() == gen {
			for _, cond := range vs.Status.GetConditions() {
				if cond.GetType() == configkube.ConditionReconciled && cond.GetStatus() == status && strings.HasPrefix(cond.GetMessage(), msg) {
					got = cond
					return nil
				}
			}
		}
		return fmt.Errorf("status is %v", vs.Status.String())
	})
	return got
}
