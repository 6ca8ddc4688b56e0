package multicluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/serviceregistry/multicluster"
)

// Scale of BenchmarkRemoteClusters (issue 18): 10 remote clusters of 500
// Services each. Ten API servers do not fit a test machine, so the ten
// remote secrets point at two API servers (five each); every cluster still
// has its own informers, registry and EndpointIndex shard.
const (
	benchClusters       = 10
	benchServers        = 2
	benchServices       = 500
	benchPodsPerService = 2
	benchNamespaces     = 10
)

// populate creates benchServices Services in benchNamespaces namespaces
// (prefix-0...), each with benchPodsPerService pods and an EndpointSlice.
func populate(b *testing.B, cs kubernetes.Interface, prefix string, subnet int) {
	b.Helper()
	ctx := b.Context()
	for n := range benchNamespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, n)}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := createService(ctx, cs, fmt.Sprintf("%s-%d", prefix, i%benchNamespaces), fmt.Sprintf("svc-%d", i), subnet, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range benchServices {
		select {
		case work <- i:
		case err := <-errs:
			b.Fatal(err)
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

func createService(ctx context.Context, cs kubernetes.Interface, ns, name string, subnet, i int) error {
	labels := map[string]string{"app": name}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	portName, port := "http", int32(8080)
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: ns, Labels: map[string]string{"kubernetes.io/service-name": name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}
	for p := range benchPodsPerService {
		pod := fmt.Sprintf("%s-%d", name, p)
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns, Labels: map[string]string{"app": name, "version": "v1"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
		ip := fmt.Sprintf("10.%d.%d.%d", subnet, (i*benchPodsPerService+p)/250, (i*benchPodsPerService+p)%250+1)
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod, Namespace: ns}})
	}
	_, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{})
	return err
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkRemoteClusters adds 10 remote clusters of 500 Services (1,000
// pods) each at once to a multicluster controller and reports, per
// iteration: the time until all synced (all-synced-s), the median and
// slowest cluster (median-sync-s, max-sync-s, from the secrets' creation),
// and the Go heap in use per cluster once synced (heap-MB/cluster). Each
// iteration then deletes the secrets and waits until the clusters left.
//
//	flock /tmp/meshpilot-bench.lock hack/testenv.sh exec go test -run '^$' -bench RemoteClusters -benchtime 3x ./test/multicluster/
func BenchmarkRemoteClusters(b *testing.B) {
	envs := make([]*kubetest.Env, benchServers+1)
	for i := range envs {
		e, err := kubetest.New(b.Context(), kubetest.Options{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(e.Stop)
		envs[i] = e
	}
	local, servers := envs[0], envs[1:]
	kubeconfigs := make([][]byte, len(servers))
	for i, e := range servers {
		populate(b, e.Clientset(), fmt.Sprintf("s%d", i), 100+i)
		raw, err := os.ReadFile(e.Kubeconfig())
		if err != nil {
			b.Fatal(err)
		}
		kubeconfigs[i] = raw
	}
	cs := local.Clientset()
	if _, err := cs.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	secrets := cs.CoreV1().Secrets("istio-system")

	endpoints := model.NewEndpointIndex()
	c, err := multicluster.NewController(multicluster.Options{
		Client: cs, Namespace: "istio-system", LocalClusterID: "local", Domain: "cluster.local", Endpoints: endpoints,
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	if err := c.WaitReady(b.Context()); err != nil {
		b.Fatal(err)
	}

	var allSynced, medianSync, maxSync, heapPer float64
	b.ResetTimer()
	for range b.N {
		before := heapInUse()
		start := time.Now()
		for i := range benchClusters {
			id := fmt.Sprintf("cluster-%d", i)
			if _, err := secrets.Create(b.Context(), remoteSecret(id, kubeconfigs[i%len(kubeconfigs)]), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		synced := map[string]time.Duration{}
		for len(synced) < benchClusters {
			for _, cl := range c.Clusters() {
				if _, ok := synced[cl.ID]; !ok && cl.Status == multicluster.StatusSynced {
					synced[cl.ID] = time.Since(start)
				}
			}
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("%d of %d clusters synced after 5 minutes", len(synced), benchClusters)
			}
			time.Sleep(5 * time.Millisecond) // sampling the sync times, not waiting for them
		}
		all := time.Since(start)
		b.StopTimer()
		times := make([]time.Duration, 0, len(synced))
		for _, d := range synced {
			times = append(times, d)
		}
		slices.Sort(times)
		// Every API server also has kubernetes.default: one hostname more.
		if got, want := len(c.Services()), benchServers*benchServices+1; got != want {
			b.Fatalf("%d services, want %d", got, want)
		}
		after := heapInUse()
		allSynced += all.Seconds()
		medianSync += times[len(times)/2].Seconds()
		maxSync += times[len(times)-1].Seconds()
		heapPer += float64(after-before) / benchClusters / (1 << 20)
		for i := range benchClusters {
			if err := secrets.Delete(b.Context(), multicluster.RemoteSecretPrefix+fmt.Sprintf("cluster-%d", i), metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		for len(c.Clusters()) > 0 || len(c.Services()) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(allSynced/n, "all-synced-s")
	b.ReportMetric(medianSync/n, "median-sync-s")
	b.ReportMetric(maxSync/n, "max-sync-s")
	b.ReportMetric(heapPer/n, "heap-MB/cluster")
}
