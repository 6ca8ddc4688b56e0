// Package patch keeps the sidecar-injection and validation webhook
// configurations pointing at pilot-discovery usable: it patches the CA root
// into their caBundle (and again whenever something resets it), and turns
// the validation webhook's failurePolicy to Fail once the webhook serves, as
// istiod's webhook patcher and validation controller do.
package patch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	admissioninformers "k8s.io/client-go/informers/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

const (
	defaultResync = 10 * time.Minute
	// maxRetries bounds rate-limited retries of one configuration; after
	// that the next event or resync tries again.
	maxRetries = 12
)

// Queue keys: the two configurations.
const (
	injectionKey  = "mutating"
	validationKey = "validating"
)

// Options configures a Patcher.
type Options struct {
	// Client reads and updates the webhook configurations.
	Client kubernetes.Interface
	// InjectionName is the MutatingWebhookConfiguration (the chart's
	// istio-sidecar-injector[-REVISION]); "" leaves injection alone.
	InjectionName string
	// ValidationName is the ValidatingWebhookConfiguration (the chart's
	// istio-validator[-REVISION]-NAMESPACE); "" leaves validation alone.
	ValidationName string
	// ServiceName and ServiceNamespace select the webhooks to patch: those
	// whose clientConfig.service is this Service. An empty ServiceName
	// patches every webhook of the two configurations.
	ServiceName, ServiceNamespace string
	// Root returns the CA root PEM to trust; an empty result patches no
	// caBundle.
	Root func() []byte
	// Changes receives a value whenever Root's result changed. Nil means
	// the root never changes.
	Changes <-chan struct{}
	// Log receives one line per update; nil discards.
	Log *slog.Logger
	// ResyncPeriod is the informers' resync period; 0 means 10 minutes.
	ResyncPeriod time.Duration
}

// Patcher reconciles the two webhook configurations. It is meant to run on
// the leader only: cancelling Run stops everything it started, and Run may
// be called again afterwards.
type Patcher struct {
	opts    Options
	log     *slog.Logger
	running atomic.Bool
	serving atomic.Bool
	// kick wakes a running Run when MarkServing is called.
	kick chan struct{}
}

// New returns a Patcher; Run starts it.
func New(o Options) *Patcher {
	if o.ResyncPeriod <= 0 {
		o.ResyncPeriod = defaultResync
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Patcher{opts: o, log: log.With("component", "webhook-patcher"), kick: make(chan struct{}, 1)}
}

// MarkServing records that the validation webhook serves: from now on its
// failurePolicy is kept at Fail. Safe to call at any time, before or
// during Run, from any goroutine.
func (p *Patcher) MarkServing() {
	if p.serving.Swap(true) {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run is the state of one Run.
type run struct {
	p          *Patcher
	ctx        context.Context
	queue      workqueue.TypedRateLimitingInterface[string]
	mutating   admissionlisters.MutatingWebhookConfigurationLister
	validating admissionlisters.ValidatingWebhookConfigurationLister
}

// Run watches the two configurations by name and patches them until ctx
// is done. It returns nil then, after its informers, queue and worker have
// stopped, or an error if it could not start.
func (p *Patcher) Run(ctx context.Context) error {
	if p.opts.Client == nil || p.opts.Root == nil {
		return errors.New("webhook patcher: Client and Root are required")
	}
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("webhook patcher: already running")
	}
	defer p.running.Store(false)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &run{
		p:     p,
		ctx:   runCtx,
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
	}
	var informers []cache.SharedIndexInformer
	if name := p.opts.InjectionName; name != "" {
		inf := admissioninformers.NewFilteredMutatingWebhookConfigurationInformer(p.opts.Client, p.opts.ResyncPeriod,
			cache.Indexers{}, byName(name))
		if err := r.watch(inf, injectionKey); err != nil {
			return err
		}
		r.mutating = admissionlisters.NewMutatingWebhookConfigurationLister(inf.GetIndexer())
		informers = append(informers, inf)
	}
	if name := p.opts.ValidationName; name != "" {
		inf := admissioninformers.NewFilteredValidatingWebhookConfigurationInformer(p.opts.Client, p.opts.ResyncPeriod,
			cache.Indexers{}, byName(name))
		if err := r.watch(inf, validationKey); err != nil {
			return err
		}
		r.validating = admissionlisters.NewValidatingWebhookConfigurationLister(inf.GetIndexer())
		informers = append(informers, inf)
	}

	// On return: shut the queue down, cancel in-flight updates and the
	// informers, then wait for every goroutine.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	defer r.queue.ShutDown()
	synced := make([]cache.InformerSynced, 0, len(informers))
	for _, inf := range informers {
		wg.Go(func() { inf.RunWithContext(runCtx) })
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(runCtx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("webhook patcher: informer caches did not sync")
	}
	p.log.Info("webhook patcher synced", "injection", p.opts.InjectionName, "validation", p.opts.ValidationName)
	r.enqueueAll()
	wg.Go(r.work)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.opts.Changes:
			p.log.Info("CA root changed; re-patching caBundle")
			r.enqueueAll()
		case <-p.kick:
			p.log.Info("validation webhook serves; setting failurePolicy Fail")
			r.enqueueAll()
		}
	}
}

// byName restricts a list/watch to the object called name.
func byName(name string) func(*metav1.ListOptions) {
	return func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
}

// watch enqueues key on every event of inf.
func (r *run) watch(inf cache.SharedIndexInformer, key string) error {
	enqueue := func(any) { r.queue.Add(key) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("webhook patcher: %s handler: %w", key, err)
	}
	return nil
}

func (r *run) enqueueAll() {
	if r.mutating != nil {
		r.queue.Add(injectionKey)
	}
	if r.validating != nil {
		r.queue.Add(validationKey)
	}
}

// work processes the queue until it shuts down.
func (r *run) work() {
	for {
		key, shutdown := r.queue.Get()
		if shutdown {
			return
		}
		r.process(key)
	}
}

func (r *run) process(key string) {
	defer r.queue.Done(key)
	var err error
	if key == injectionKey {
		err = r.syncInjection()
	} else {
		err = r.syncValidation()
	}
	switch {
	case err == nil || r.ctx.Err() != nil:
		r.queue.Forget(key)
	case r.queue.NumRequeues(key) >= maxRetries:
		r.p.log.Error("patching a webhook configuration failed; giving up until the next change or resync",
			"configuration", key, "err", err)
		r.queue.Forget(key)
	default:
		if !apierrors.IsConflict(err) {
			r.p.log.Warn("patching a webhook configuration failed; will retry", "configuration", key, "err", err)
		}
		r.queue.AddRateLimited(key)
	}
}

// ours reports whether a webhook calls the configured Service.
func (p *Patcher) ours(cc admissionv1.WebhookClientConfig) bool {
	if p.opts.ServiceName == "" {
		return true
	}
	s := cc.Service
	return s != nil && s.Name == p.opts.ServiceName && s.Namespace == p.opts.ServiceNamespace
}

// patchBundle sets *bundle to root when it differs; it reports a change.
func patchBundle(bundle *[]byte, root []byte) bool {
	if len(root) == 0 || bytes.Equal(*bundle, root) {
		return false
	}
	*bundle = bytes.Clone(root)
	return true
}
