package kubeca

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/internal/testutil"
)

const pollTimeout = 30 * time.Second

// rootSource is a root that tests change, with its change signal.
type rootSource struct {
	pem     atomic.Pointer[[]byte]
	changes chan struct{}
}

func newRootSource(t *testing.T) *rootSource {
	r := &rootSource{changes: make(chan struct{}, 1)}
	r.set(newRoot(t).RootPEM)
	return r
}

func (r *rootSource) get() []byte { return *r.pem.Load() }

func (r *rootSource) set(pem []byte) {
	r.pem.Store(&pem)
	select {
	case r.changes <- struct{}{}:
	default:
	}
}

// running is a Publisher's Run in progress.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func startPublisher(t *testing.T, root *rootSource, log *slog.Logger) (*Publisher, *running) {
	t.Helper()
	p := NewPublisher(PublisherOptions{
		Client:  env.Clientset(),
		Root:    root.get,
		Changes: root.changes,
		Log:     log,
	})
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	poll(t, "publisher synced", func(context.Context) (bool, error) { return p.Synced(), nil })
	return p, r
}

// stop cancels Run and waits for it to return (idempotent).
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run returned %v, want nil after cancel", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(pollTimeout):
		t.Fatalf("Run did not return within %v of cancel", pollTimeout)
	}
}

func poll(t *testing.T, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, pollTimeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// published reports whether ns holds the root ConfigMap with root and the label.
func published(ns string, root func() []byte) wait.ConditionWithContextFunc {
	return func(ctx context.Context) (bool, error) {
		cm, err := env.Clientset().CoreV1().ConfigMaps(ns).Get(ctx, RootCertConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return len(cm.Data) == 1 && cm.Data[RootCertKey] == string(root()) && cm.Labels["istio.io/config"] == "true", nil
	}
}

// everyLiveNamespacePublished reports whether every namespace not being
// deleted holds root.
func everyLiveNamespacePublished(root func() []byte) wait.ConditionWithContextFunc {
	return func(ctx context.Context) (bool, error) {
		nss, err := env.Clientset().CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ns := range nss.Items {
			if ns.DeletionTimestamp != nil {
				continue
			}
			if ok, err := published(ns.Name, root)(ctx); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	}
}

func TestPublisherKeepsEveryNamespaceInSync(t *testing.T) {
	ctx := context.Background()
	cms := func(ns string) interface {
		Get(context.Context, string, metav1.GetOptions) (*corev1.ConfigMap, error)
		Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
	} {
		return env.Clientset().CoreV1().ConfigMaps(ns)
	}
	nsA := createNamespace(t, "pub-a")
	nsB := createNamespace(t, "pub-b")
	nsGone := createNamespace(t, "pub-gone")
	root := newRootSource(t)
	var logs testutil.Buffer
	_, _ = startPublisher(t, root, slog.New(slog.NewTextHandler(&logs, nil)))

	// Namespaces that existed before Run, including the system ones.
	for _, ns := range []string{nsA, nsB, "default", "kube-system"} {
		poll(t, "ConfigMap in existing namespace "+ns, published(ns, root.get))
	}

	var nsNew string
	t.Run("new namespace", func(t *testing.T) {
		nsNew = createNamespace(t, "pub-new")
		poll(t, "ConfigMap in the new namespace", published(nsNew, root.get))
	})

	t.Run("deleted ConfigMap is recreated", func(t *testing.T) {
		if err := cms(nsA).Delete(ctx, RootCertConfigMap, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, "ConfigMap recreated", published(nsA, root.get))
	})

	t.Run("edited ConfigMap is restored", func(t *testing.T) {
		cm, err := cms(nsB).Get(ctx, RootCertConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[RootCertKey] = "tampered"
		cm.Data["extra"] = "x"
		delete(cm.Labels, "istio.io/config")
		if _, err := cms(nsB).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, "ConfigMap restored", published(nsB, root.get))
	})

	t.Run("root change reaches every namespace", func(t *testing.T) {
		poll(t, "namespace to delete published", published(nsGone, root.get))
		old := root.get()
		// nsGone starts deleting; with no controller-manager it stays
		// Terminating, and writes into it are refused.
		if err := env.Clientset().CoreV1().Namespaces().Delete(ctx, nsGone, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, "namespace terminating", func(ctx context.Context) (bool, error) {
			ns, err := env.Clientset().CoreV1().Namespaces().Get(ctx, nsGone, metav1.GetOptions{})
			return err == nil && ns.DeletionTimestamp != nil, err
		})
		root.set(newRoot(t).RootPEM)
		poll(t, "new root in every live namespace", everyLiveNamespacePublished(root.get))
		// The terminating namespace is skipped, not retried.
		cm, err := cms(nsGone).Get(ctx, RootCertConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data[RootCertKey] != string(old) {
			t.Errorf("ConfigMap in a terminating namespace was rewritten")
		}
		if strings.Contains(logs.String(), "will retry") {
			t.Errorf("publisher retried a write:\n%s", logs.String())
		}
	})

	out := logs.String()
	if strings.Contains(out, "BEGIN CERTIFICATE") {
		t.Errorf("logs contain the PEM:\n%s", out)
	}
	for _, want := range []string{"namespace=" + nsNew + " action=create", "namespace=" + nsA + " action=create", "namespace=" + nsB + " action=update"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
}

func TestPublisherStopsCleanlyAndRunsAgain(t *testing.T) {
	ns := createNamespace(t, "pub-restart")
	root := newRootSource(t)
	// Warm the shared client's connection so it does not count as a leak.
	if _, err := env.Clientset().CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()

	for round := range 2 {
		p, r := startPublisher(t, root, nil)
		if round == 1 {
			// The second leader term repairs what changed meanwhile.
			root.set(newRoot(t).RootPEM)
		}
		poll(t, "ConfigMap published", published(ns, root.get))
		// A cancelled context: were a second Run allowed, it would return
		// at once instead of hanging the test.
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		if err := p.Run(cancelled); err == nil {
			t.Errorf("a second concurrent Run of one Publisher returned nil, want an error")
		}
		r.stop(t)
		if p.Synced() {
			t.Errorf("Synced true after Run returned")
		}
		poll(t, "goroutines back to the count before Run", func(context.Context) (bool, error) {
			return runtime.NumGoroutine() <= before, nil
		})
	}
}

func TestPublisherRunWithoutClientFails(t *testing.T) {
	err := NewPublisher(PublisherOptions{}).Run(context.Background())
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("Run without a client: %v, want a configuration error", err)
	}
}

// A write refused because the namespace is being deleted is dropped, not
// retried; other failures are retried.
func TestPublisherAbandonsTerminatingNamespaces(t *testing.T) {
	ctx := context.Background()
	cs := env.Clientset()
	nsDying := createNamespace(t, "pub-dying")
	if err := cs.CoreV1().Namespaces().Delete(ctx, nsDying, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's own refusal, as the publisher would get it.
	_, refused := cs.CoreV1().ConfigMaps(nsDying).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RootCertConfigMap, Namespace: nsDying},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(refused) {
		t.Fatalf("create in a terminating namespace: %v, want Forbidden", refused)
	}

	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	now := metav1.Now()
	live := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "live"}}
	dying := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dying", DeletionTimestamp: &now}}
	for _, ns := range []*corev1.Namespace{live, dying} {
		if err := indexer.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	r := &publishRun{namespaces: corelisters.NewNamespaceLister(indexer)}
	forbidden := apierrors.NewForbidden(corev1.Resource("configmaps"), RootCertConfigMap, errors.New("denied"))
	notFound := apierrors.NewNotFound(corev1.Resource("namespaces"), "x")
	cases := []struct {
		ns   string
		err  error
		want bool
	}{
		{"live", refused, true}, // the cause says so, whatever the cache says
		{"dying", forbidden, true},
		{"gone", notFound, true},
		{"live", forbidden, false}, // RBAC: retry (bounded), the namespace stays
		{"live", errors.New("connection refused"), false},
		{"dying", errors.New("connection refused"), false},
	}
	for _, tc := range cases {
		if got := r.abandon(tc.ns, tc.err); got != tc.want {
			t.Errorf("abandon(%s, %v) = %v, want %v", tc.ns, tc.err, got, tc.want)
		}
	}
}
