package deploy_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/pilot/config/gateway/deploy"
)

// BenchmarkDeploy100Gateways creates 100 Gateways (one namespace, created
// as fast as the client goes) and measures, from the API server's watch,
// the time from the first create to the last of their Services; then the
// time of one resync pass over all of them and what it applied (nothing
// changed: it must apply nothing). Run it with -benchtime=1x.
func BenchmarkDeploy100Gateways(b *testing.B) {
	const n = 100
	for range b.N {
		runDeployBench(b, n)
	}
}

func runDeployBench(b *testing.B, n int) {
	b.Helper()
	f := startBench(b)
	ctx := b.Context()
	start := time.Now()
	for i := range n {
		_, err := f.gw.GatewayV1().Gateways(f.ns).Create(ctx, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gw%d", i)},
			Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: []gwv1.Listener{
				{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
				{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType},
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
	}
	created := time.Since(start)
	deadline := time.After(2 * time.Minute)
	if got := f.countServices(b, n, deadline); got < n {
		f.passes.mu.Lock()
		passed := len(f.passes.seen)
		f.passes.mu.Unlock()
		b.Fatalf("%d of %d Services after 2 minutes (%d Gateways passed over); logs:\n%s", got, n, passed, f.logs.String())
	}
	last := time.Since(start)

	// Every Gateway passed over again after a resync tick (3 s in
	// startBench) must have applied nothing more: 3 applies per Gateway
	// in all.
	resyncAfter := start.Add(last + 3*time.Second)
	for {
		f.passes.mu.Lock()
		ch, done, applies := f.passes.ch, 0, 0
		for _, ps := range f.passes.seen {
			if ps[len(ps)-1].at.After(resyncAfter) {
				done++
			}
			for _, p := range ps {
				applies += len(p.changes)
			}
		}
		f.passes.mu.Unlock()
		if done == n {
			b.ReportMetric(created.Seconds(), "s-creates")
			b.ReportMetric(last.Seconds(), "s-to-last-service")
			b.ReportMetric(float64(applies)/float64(n), "applies/gateway")
			return
		}
		select {
		case <-ch:
		case <-deadline:
			b.Fatalf("resync: %d of %d Gateways passed over again", done, n)
		}
	}
}

// startBench is start for a benchmark, with a 3 s resync.
func startBench(tb testing.TB) *fixture {
	f := setup(tb)
	opts := f.shared(tb)
	opts.Reconciled, opts.Resync = f.passes.record, 3*time.Second
	opts.Log = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := deploy.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Run(ctx) })
	tb.Cleanup(func() { cancel(); wg.Wait() })
	return f
}

// countServices watches the managed Services of f's namespace until n
// exist or deadline, and returns how many exist. A watch the server ends
// is started again from a new list.
func (f *fixture) countServices(b *testing.B, n int, deadline <-chan time.Time) int {
	sel := metav1.ListOptions{LabelSelector: deploy.ManagedLabel + "=" + deploy.ManagedValue}
	seen := map[string]bool{}
	for {
		list, err := f.kube.CoreV1().Services(f.ns).List(b.Context(), sel)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range list.Items {
			seen[s.Name] = true
		}
		if len(seen) >= n {
			return len(seen)
		}
		o := sel
		o.ResourceVersion = list.ResourceVersion
		w, err := f.kube.CoreV1().Services(f.ns).Watch(b.Context(), o)
		if err != nil {
			b.Fatal(err)
		}
	events:
		for {
			select {
			case ev, open := <-w.ResultChan():
				if !open {
					break events
				}
				if svc, ok := ev.Object.(*corev1.Service); ok && ev.Type == watch.Added {
					seen[svc.Name] = true
					if len(seen) >= n {
						w.Stop()
						return len(seen)
					}
				}
			case <-deadline:
				w.Stop()
				return len(seen)
			}
		}
		w.Stop()
	}
}

// BenchmarkConfigMapCache measures the memory the deployment controller
// keeps for the ConfigMaps of a cluster (it watches their metadata, for
// parametersRef changes): the heap grown from before the controller
// starts to its first pass over a Gateway (its caches synced), in KB,
// first with no ConfigMap, then with 1,000 ConfigMaps of 4 KiB of data
// and a 256-byte annotation each (after a warm-up run); their difference
// over 1,000 is the cost of one ConfigMap. "typed" is the same measure for a plain
// ConfigMap informer, which caches their data too. Run it with
// -benchtime=1x, once per process (the cluster's ConfigMaps are counted).
func BenchmarkConfigMapCache(b *testing.B) {
	const n = 1000
	f := setup(b)
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	controller := func(b *testing.B) {
		for range b.N {
			before := heap()
			g := startBenchIn(b, f)
			key := types.NamespacedName{Namespace: f.ns, Name: fmt.Sprintf("gw-%d", nsSeq.Add(1))}
			if _, err := f.gw.GatewayV1().Gateways(f.ns).Create(b.Context(), &gwv1.Gateway{
				ObjectMeta: metav1.ObjectMeta{Name: key.Name},
				Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: []gwv1.Listener{
					{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}},
			}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			g.passes.waitPassB(b, key)
			b.ReportMetric(float64(heap()-before)/1000, "heap-KB")
		}
	}
	// The first run also pays for what is made once per process
	// (clients' codecs, type registrations): it is not a measure.
	b.Run("warm-up", controller)
	b.Run("controller-0", controller)
	data := map[string]string{"blob": strings.Repeat("x", 4096)}
	for i := range n {
		if _, err := f.kube.CoreV1().ConfigMaps(f.ns).Create(b.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm%d", i), Labels: map[string]string{"app": "bench"},
				Annotations: map[string]string{"note": strings.Repeat("y", 256)}},
			Data: data,
		}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("controller-1000", controller)
	b.Run("typed-1000", func(b *testing.B) {
		for range b.N {
			before := heap()
			factory := informers.NewSharedInformerFactory(f.kube, 0)
			inf := factory.Core().V1().ConfigMaps().Informer()
			ctx, cancel := context.WithCancel(b.Context())
			factory.Start(ctx.Done())
			if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				b.Fatal("ConfigMap informer not synced")
			}
			b.ReportMetric(float64(heap()-before)/1000, "heap-KB")
			runtime.KeepAlive(inf)
			cancel()
			factory.Shutdown()
		}
	})
}

// startBenchIn is startBench on an existing fixture.
func startBenchIn(tb testing.TB, f *fixture) *fixture {
	g := *f
	g.passes = &passes{ch: make(chan struct{}), seen: map[types.NamespacedName][]pass{}}
	opts := g.shared(tb)
	opts.Reconciled = g.passes.record
	opts.Log = slog.New(slog.NewTextHandler(g.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := deploy.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Run(ctx) })
	tb.Cleanup(func() { cancel(); wg.Wait() })
	return &g
}

// waitPassB waits for a pass over gw, for a benchmark.
func (p *passes) waitPassB(b *testing.B, gw types.NamespacedName) {
	deadline := time.After(time.Minute)
	for {
		p.mu.Lock()
		n, ch := len(p.seen[gw]), p.ch
		p.mu.Unlock()
		if n > 0 {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			b.Fatalf("no pass over %s in a minute", gw)
		}
	}
}
