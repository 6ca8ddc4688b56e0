package kubeca

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// RootCertConfigMap is the ConfigMap, in every namespace, holding the mesh's
// root certificate(s).
const RootCertConfigMap = "istio-ca-root-cert"

// RootCertKey is RootCertConfigMap's data key for the PEM root(s).
const RootCertKey = "root-cert.pem"

// ConfigLabel marks RootCertConfigMap as Istio configuration, as istiod
// labels it.
const ConfigLabel = "istio.io/config"

const (
	defaultResync = 10 * time.Minute
	// maxRetries bounds rate-limited retries of one namespace; after that
	// the next event or resync for it tries again.
	maxRetries = 12
)

// PublisherOptions configures a Publisher.
type PublisherOptions struct {
	// Client writes ConfigMaps and watches Namespaces and ConfigMaps.
	Client kubernetes.Interface
	// Root returns the current root certificate PEM. It may change; an
	// empty result publishes nothing.
	Root func() []byte
	// Changes receives a value whenever Root's result changed; every
	// namespace is then re-published. Nil means the root never changes.
	Changes <-chan struct{}
	// Log receives one line per ConfigMap write; nil discards.
	Log *slog.Logger
	// ResyncPeriod is the informers' resync period (each resync re-checks
	// every namespace); 0 means 10 minutes.
	ResyncPeriod time.Duration
	// Workers is how many namespaces are written concurrently; 0 means 2.
	Workers int
}

// Publisher keeps ConfigMap istio-ca-root-cert in every namespace equal to
// the current root. It is meant to run only on the leader: cancelling Run
// stops everything it started, and a new Publisher may Run afterwards.
type Publisher struct {
	opts    PublisherOptions
	log     *slog.Logger
	running atomic.Bool
	synced  atomic.Bool
}

// NewPublisher returns a Publisher; Run starts it.
func NewPublisher(o PublisherOptions) *Publisher {
	if o.ResyncPeriod <= 0 {
		o.ResyncPeriod = defaultResync
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Publisher{opts: o, log: log.With("configmap", RootCertConfigMap)}
}

// Synced reports whether the current Run's informers have synced.
func (p *Publisher) Synced() bool { return p.synced.Load() }

// publishRun is the state of one Run.
type publishRun struct {
	p          *Publisher
	ctx        context.Context // cancelled when Run returns, after the queue shut down
	queue      workqueue.TypedRateLimitingInterface[string]
	namespaces corelisters.NamespaceLister
	configMaps corelisters.ConfigMapLister
}

// Run watches Namespaces and the istio-ca-root-cert ConfigMaps and writes
// the ConfigMap wherever it is missing or differs from Root (including
// after a user edits or deletes it). It returns nil when ctx is done, after
// its informers, queue and workers have stopped, or an error if it could
// not start.
func (p *Publisher) Run(ctx context.Context) error {
	if p.opts.Client == nil || p.opts.Root == nil {
		return errors.New("root publisher: Client and Root are required")
	}
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("root publisher: already running")
	}
	defer p.running.Store(false)
	defer p.synced.Store(false)

	nsInformer := coreinformers.NewNamespaceInformer(p.opts.Client, p.opts.ResyncPeriod, cache.Indexers{})
	cmInformer := coreinformers.NewFilteredConfigMapInformer(p.opts.Client, metav1.NamespaceAll, p.opts.ResyncPeriod,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", RootCertConfigMap).String()
		})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &publishRun{
		p:          p,
		ctx:        runCtx,
		queue:      workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		namespaces: corelisters.NewNamespaceLister(nsInformer.GetIndexer()),
		configMaps: corelisters.NewConfigMapLister(cmInformer.GetIndexer()),
	}
	if _, err := nsInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.enqueueNamespace,
		UpdateFunc: func(_, cur any) { r.enqueueNamespace(cur) },
		// A deleted namespace takes its ConfigMap with it.
	}); err != nil {
		return fmt.Errorf("root publisher: namespace handler: %w", err)
	}
	if _, err := cmInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.enqueueOwner,
		UpdateFunc: func(_, cur any) { r.enqueueOwner(cur) },
		DeleteFunc: r.enqueueOwner,
	}); err != nil {
		return fmt.Errorf("root publisher: configmap handler: %w", err)
	}

	// On return: shut the queue down, cancel in-flight writes and the
	// informers, then wait for every goroutine.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	defer r.queue.ShutDown()
	wg.Go(func() { nsInformer.RunWithContext(runCtx) })
	wg.Go(func() { cmInformer.RunWithContext(runCtx) })

	if !cache.WaitForCacheSync(runCtx.Done(), nsInformer.HasSynced, cmInformer.HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("root publisher: informer caches did not sync")
	}
	p.synced.Store(true)
	p.log.Info("root publisher synced; publishing to every namespace")
	r.enqueueAll()

	for range p.opts.Workers {
		wg.Go(r.work)
	}
	wg.Go(func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case <-p.opts.Changes:
				p.log.Info("root changed; re-publishing to every namespace")
				r.enqueueAll()
			}
		}
	})
	<-ctx.Done()
	return nil
}

func (r *publishRun) enqueueNamespace(obj any) {
	if ns, ok := obj.(*corev1.Namespace); ok {
		r.queue.Add(ns.Name)
	}
}

func (r *publishRun) enqueueOwner(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == RootCertConfigMap {
		r.queue.Add(cm.Namespace)
	}
}

func (r *publishRun) enqueueAll() {
	all, err := r.namespaces.List(labels.Everything())
	if err != nil {
		r.p.log.Error("listing namespaces from the cache", "err", err)
		return
	}
	for _, ns := range all {
		r.queue.Add(ns.Name)
	}
}

// work processes namespaces until the queue shuts down.
func (r *publishRun) work() {
	for {
		ns, shutdown := r.queue.Get()
		if shutdown {
			return
		}
		r.process(ns)
	}
}

func (r *publishRun) process(ns string) {
	defer r.queue.Done(ns)
	err := r.sync(ns)
	switch {
	case err == nil:
		r.queue.Forget(ns)
	case r.abandon(ns, err):
		r.p.log.Info("not publishing the root to a namespace being deleted", "namespace", ns, "err", err)
		r.queue.Forget(ns)
	case r.queue.NumRequeues(ns) >= maxRetries:
		r.p.log.Error("publishing the root failed; giving up until the next change or resync",
			"namespace", ns, "err", err)
		r.queue.Forget(ns)
	default:
		r.p.log.Warn("publishing the root failed; will retry", "namespace", ns, "err", err)
		r.queue.AddRateLimited(ns)
	}
}

// sync makes ConfigMap ns/istio-ca-root-cert hold the current root.
func (r *publishRun) sync(ns string) error {
	namespace, err := r.namespaces.Get(ns)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("namespace %s from the cache: %w", ns, err)
	}
	if terminating(namespace) {
		return nil
	}
	root := r.p.opts.Root()
	if len(root) == 0 {
		return nil
	}
	want := map[string]string{RootCertKey: string(root)}

	cms := r.p.opts.Client.CoreV1().ConfigMaps(ns)
	ctx := r.ctx
	cur, err := r.configMaps.ConfigMaps(ns).Get(RootCertConfigMap)
	if apierrors.IsNotFound(err) {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:      RootCertConfigMap,
				Namespace: ns,
				Labels:    map[string]string{ConfigLabel: "true"},
			},
			Data: want,
		}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ConfigMap %s/%s: %w", ns, RootCertConfigMap, err)
		}
		r.p.log.Info("root certificate published", "namespace", ns, "action", "create")
		return nil
	}
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s from the cache: %w", ns, RootCertConfigMap, err)
	}
	if maps.Equal(cur.Data, want) && cur.Labels[ConfigLabel] == "true" && len(cur.BinaryData) == 0 {
		return nil
	}
	upd := cur.DeepCopy()
	upd.Data = want
	upd.BinaryData = nil
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	upd.Labels[ConfigLabel] = "true"
	if _, err := cms.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating ConfigMap %s/%s: %w", ns, RootCertConfigMap, err)
	}
	r.p.log.Info("root certificate published", "namespace", ns, "action", "update")
	return nil
}

// abandon reports whether err writing into ns means the namespace is going
// away, so retrying is pointless.
func (r *publishRun) abandon(ns string, err error) bool {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return true
	}
	if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return false
	}
	namespace, gerr := r.namespaces.Get(ns)
	return apierrors.IsNotFound(gerr) || (gerr == nil && terminating(namespace))
}

func terminating(ns *corev1.Namespace) bool {
	return ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating
}
