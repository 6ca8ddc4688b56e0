package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwinformersv1 "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions/apis/v1"
	gwlisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"
)

// Defaults of Options.
const (
	DefaultTimeout    = 10 * time.Second
	DefaultMinBackoff = 200 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Minute
	DefaultResync     = 5 * time.Minute
	workers           = 2
)

// Kinds of the objects made, as logged.
const (
	KindServiceAccount = "ServiceAccount"
	KindDeployment     = "Deployment"
	KindService        = "Service"
	KindHPA            = "HorizontalPodAutoscaler"
	KindPDB            = "PodDisruptionBudget"
)

// Options configure a Controller.
type Options struct {
	// Kube applies and deletes the objects and watches those it made.
	Kube kubernetes.Interface
	// Gateways and Classes are the Gateway and GatewayClass informers
	// this controller shares with the translation controller, so that
	// each kind is watched once (gateway.Controller.GatewayInformers);
	// their owner starts them.
	Gateways gwinformersv1.GatewayInformer
	Classes  gwinformersv1.GatewayClassInformer
	// ListenerSets is the translation controller's ListenerSet informer,
	// nil when the cluster does not serve ListenerSet (ListenerSetServed).
	ListenerSets gwinformersv1.ListenerSetInformer
	// Metadata watches the metadata of ConfigMaps (not their data), so a
	// change of a Gateway's parametersRef ConfigMap, or of its class's
	// defaults, reconciles it.
	Metadata metadata.Interface
	// SystemNamespace holds the class defaults ConfigMaps
	// (ClassDefaultsLabel): the control plane's namespace, as istiod's.
	SystemNamespace string
	// Timeout bounds the API calls made for one Gateway; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the delay before a Gateway whose
	// objects could not be applied is tried again (doubling from
	// MinBackoff); zero takes the defaults.
	MinBackoff, MaxBackoff time.Duration
	// Resync is how often every Gateway is reconciled again (a safety
	// net: changes of Gateways, their objects and their parametersRef
	// ConfigMaps are watched); zero means DefaultResync.
	Resync time.Duration
	// Reconciled, when set, is told after each pass over a Gateway what
	// was applied or deleted ("applied Service web-istio") and the error.
	Reconciled func(gateway types.NamespacedName, changes []string, err error)
	Log        *slog.Logger
}

// Controller keeps the objects of each Gateway of our classes in sync
// while Run runs (on the leader only).
type Controller struct {
	opts Options
}

// New returns a Controller; nothing runs until Run.
func New(opts Options) (*Controller, error) {
	if opts.Kube == nil || opts.Gateways == nil || opts.Classes == nil || opts.Metadata == nil {
		return nil, errors.New("gateway deployment controller: Kube, Gateways, Classes and Metadata are required")
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MinBackoff == 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.Resync == 0 {
		opts.Resync = DefaultResync
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Controller{opts: opts}, nil
}

// Run watches Gateways and GatewayClasses (through the shared informers),
// the objects this controller made (those labelled
// gateway.istio.io/managed) and the metadata of ConfigMaps, and
// reconciles each Gateway after it, one of its objects or its
// parametersRef ConfigMap changed, until ctx is done. Each call starts
// its own caches of the objects made, so a replica that leads again picks
// up what changed meanwhile.
func (c *Controller) Run(ctx context.Context) error {
	r, err := newRun(c.opts)
	if err != nil {
		return err
	}
	return r.run(ctx)
}

// objKey names one object made.
type objKey struct{ kind, namespace, name string }

// applied is what was last applied to an object: the hash of the apply
// configuration and the resourceVersion the API server answered.
type applied struct{ hash, rv string }

// permanent marks an error retrying cannot fix: the Gateway is tried
// again when it or its objects change.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// run is the state of one Run.
type run struct {
	opts       Options
	kFactory   informers.SharedInformerFactory
	configMaps cache.SharedIndexInformer
	// handlers registered on the shared informers, removed when Run ends.
	handlers []sharedHandler
	gateways gwlisters.GatewayLister
	classes  gwlisters.GatewayClassLister
	deps     appslisters.DeploymentLister
	svcs     corelisters.ServiceLister
	sas      corelisters.ServiceAccountLister
	hpas     autoscalinglisters.HorizontalPodAutoscalerLister
	pdbs     policylisters.PodDisruptionBudgetLister
	// sets is nil when the cluster does not serve ListenerSet.
	sets   gwlisters.ListenerSetLister
	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]

	mu      sync.Mutex
	applied map[objKey]applied
	errs    map[types.NamespacedName]string // last error logged per Gateway
}

func newRun(opts Options) (*run, error) {
	r := &run{
		opts: opts,
		kFactory: informers.NewSharedInformerFactoryWithOptions(opts.Kube, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ManagedLabel + "=" + ManagedValue })),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](opts.MinBackoff, opts.MaxBackoff),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "gateway-deployment"}),
		applied: map[objKey]applied{},
		errs:    map[types.NamespacedName]string{},
	}
	gws, classes := opts.Gateways, opts.Classes
	deps, svcs, sas := r.kFactory.Apps().V1().Deployments(), r.kFactory.Core().V1().Services(), r.kFactory.Core().V1().ServiceAccounts()
	hpas, pdbs := r.kFactory.Autoscaling().V2().HorizontalPodAutoscalers(), r.kFactory.Policy().V1().PodDisruptionBudgets()
	r.gateways, r.classes, r.deps, r.svcs, r.sas = gws.Lister(), classes.Lister(), deps.Lister(), svcs.Lister(), sas.Lister()
	r.hpas, r.pdbs = hpas.Lister(), pdbs.Lister()

	if err := r.share(gws.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: r.enqueueObject,
		UpdateFunc: func(oldObj, newObj any) {
			// Status writes (attachedRoutes, conditions) change nothing here.
			if !StatusOnlyUpdate(oldObj, newObj) {
				r.enqueueObject(newObj)
			}
		},
		DeleteFunc: r.enqueueObject,
	}); err != nil {
		return nil, err
	}
	if err := r.share(classes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    r.enqueueClass,
		UpdateFunc: func(_, n any) { r.enqueueClass(n) },
		DeleteFunc: r.enqueueClass,
	}); err != nil {
		return nil, err
	}
	if err := r.watchConfigMaps(); err != nil {
		return nil, err
	}
	owned := cache.ResourceEventHandlerFuncs{
		AddFunc:    r.enqueueOwner,
		UpdateFunc: func(_, n any) { r.enqueueOwner(n) },
		DeleteFunc: r.enqueueOwner,
	}
	for _, inf := range []cache.SharedIndexInformer{deps.Informer(), svcs.Informer(), sas.Informer(), hpas.Informer(), pdbs.Informer()} {
		if _, err := inf.AddEventHandler(owned); err != nil {
			return nil, fmt.Errorf("gateway deployment controller: handler: %w", err)
		}
		r.synced = append(r.synced, inf.HasSynced)
	}
	if opts.ListenerSets != nil {
		if err := r.share(opts.ListenerSets.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    r.enqueueListenerSet,
			UpdateFunc: func(_, n any) { r.enqueueListenerSet(n) },
			DeleteFunc: r.enqueueListenerSet,
		}); err != nil {
			return nil, err
		}
		r.sets = opts.ListenerSets.Lister()
	}
	return r, nil
}

// StatusOnlyUpdate reports whether an update of a Gateway API object
// changed its status alone: not the spec (the generation, which the status
// subresource of every Gateway API kind leaves alone), uid, labels,
// annotations or deletion.
func StatusOnlyUpdate(oldObj, newObj any) bool {
	o, ok := asMeta(oldObj)
	n, ok2 := asMeta(newObj)
	if !ok || !ok2 || n.GetGeneration() == 0 {
		return false
	}
	return o.GetGeneration() == n.GetGeneration() && o.GetUID() == n.GetUID() &&
		o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) &&
		maps.Equal(o.GetLabels(), n.GetLabels()) && maps.Equal(o.GetAnnotations(), n.GetAnnotations())
}

// asMeta returns obj's metadata (also of a deleted object's tombstone).
func asMeta(obj any) (metav1.Object, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, ok := obj.(metav1.Object)
	return m, ok
}

func (r *run) enqueueObject(obj any) {
	if m, ok := asMeta(obj); ok {
		r.queue.Add(types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()})
	}
}

// enqueueClass enqueues the Gateways of a class that changed.
func (r *run) enqueueClass(obj any) {
	if m, ok := asMeta(obj); ok {
		r.enqueueClassName(m.GetName())
	}
}

// enqueueClassName enqueues the Gateways of class.
func (r *run) enqueueClassName(class string) {
	gws, _ := r.gateways.List(labels.Everything())
	for _, gw := range gws {
		if string(gw.Spec.GatewayClassName) == class {
			r.queue.Add(types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name})
		}
	}
}

// enqueueOwner enqueues the Gateway owning an object made.
func (r *run) enqueueOwner(obj any) {
	m, ok := asMeta(obj)
	if !ok {
		return
	}
	if name, ok := ownerGateway(m); ok {
		r.queue.Add(types.NamespacedName{Namespace: m.GetNamespace(), Name: name})
	}
}

// ownerGateway is the name of the Gateway in m's owner references.
func ownerGateway(m metav1.Object) (string, bool) {
	for _, o := range m.GetOwnerReferences() {
		if o.Kind == "Gateway" && o.APIVersion == gwv1.GroupVersion.String() {
			return o.Name, true
		}
	}
	return "", false
}

func (r *run) run(ctx context.Context) error {
	defer r.unshare()
	defer r.kFactory.Shutdown()
	defer r.queue.ShutDown()
	r.kFactory.Start(ctx.Done())
	cmCtx, stopConfigMaps := context.WithCancel(ctx)
	var cmDone sync.WaitGroup
	cmDone.Go(func() { r.configMaps.RunWithContext(cmCtx) })
	defer cmDone.Wait()
	defer stopConfigMaps()
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return nil
	}
	// Every Gateway, and the owners of every object made (whose Gateway
	// may have gone while no replica led).
	gws, _ := r.gateways.List(labels.Everything())
	for _, gw := range gws {
		r.enqueueObject(gw)
	}
	r.eachOwned("", "", func(_ objKey, m metav1.Object) { r.enqueueOwner(m) })
	r.opts.Log.Info("gateway deployment controller started", "gateways", len(gws))

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for r.next(ctx) {
			}
		})
	}
	tick := time.NewTicker(r.opts.Resync)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			gws, _ := r.gateways.List(labels.Everything())
			for _, gw := range gws {
				r.enqueueObject(gw)
			}
		}
	}
	r.queue.ShutDown()
	wg.Wait()
	return nil
}

// next reconciles one Gateway; false once the queue is shut down.
func (r *run) next(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	changes, err := r.reconcile(cctx, key)
	cancel()
	if ctx.Err() != nil {
		return true
	}
	if len(changes) > 0 {
		r.opts.Log.Info("gateway deployment updated", "gateway", key.String(), "changes", changes)
	}
	if r.opts.Reconciled != nil {
		r.opts.Reconciled(key, changes, err)
	}
	var perm permanent
	switch {
	case err == nil:
		r.queue.Forget(key)
		r.mu.Lock()
		delete(r.errs, key)
		r.mu.Unlock()
	case errors.As(err, &perm):
		r.queue.Forget(key)
		r.report(key, err, 0)
	default:
		r.report(key, err, r.queue.NumRequeues(key)+1)
		r.queue.AddRateLimited(key)
	}
	return true
}

// report logs err for key once per distinct message.
func (r *run) report(key types.NamespacedName, err error, attempt int) {
	msg := err.Error()
	r.mu.Lock()
	same := r.errs[key] == msg
	r.errs[key] = msg
	r.mu.Unlock()
	if same {
		return
	}
	if attempt == 0 {
		r.opts.Log.Warn("gateway not deployed", "gateway", key.String(), "error", msg)
		return
	}
	r.opts.Log.Warn("gateway deployment failed, retrying with backoff", "gateway", key.String(), "attempt", attempt, "error", msg)
}

// reconcile applies the objects Gateway key needs and deletes those of
// its objects it no longer needs (all of them when it is gone, not ours
// or deployed manually).
func (r *run) reconcile(ctx context.Context, key types.NamespacedName) ([]string, error) {
	gw, err := r.gateways.Gateways(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if apierrors.IsNotFound(err) || gw.DeletionTimestamp != nil || !r.ours(gw) || !Managed(gw) {
		gw = nil
	}
	want := map[objKey]bool{}
	var changed []string
	if gw != nil {
		overlays, err := r.overlays(ctx, gw)
		if err != nil {
			return nil, err
		}
		objs, err := Render(withListenerSets(gw, r.sets), overlays...)
		if err != nil {
			// Nothing is changed until the Gateway is.
			return nil, permanent{err}
		}
		sa, dep, svc := objs.ServiceAccount, objs.Deployment, objs.Service
		ns := key.Namespace
		steps := []step{
			{objKey{KindServiceAccount, ns, *sa.Name}, sa,
				func() (metav1.Object, error) { return r.sas.ServiceAccounts(ns).Get(*sa.Name) },
				func(ctx context.Context) (metav1.Object, error) {
					return r.opts.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, *sa.Name, metav1.GetOptions{})
				},
				func(ctx context.Context) (metav1.Object, error) {
					return r.opts.Kube.CoreV1().ServiceAccounts(ns).Apply(ctx, sa, applyOptions)
				}, &checked{}},
			{objKey{KindDeployment, ns, *dep.Name}, dep,
				func() (metav1.Object, error) { return r.deps.Deployments(ns).Get(*dep.Name) },
				func(ctx context.Context) (metav1.Object, error) {
					return r.opts.Kube.AppsV1().Deployments(ns).Get(ctx, *dep.Name, metav1.GetOptions{})
				},
				func(ctx context.Context) (metav1.Object, error) {
					return r.opts.Kube.AppsV1().Deployments(ns).Apply(ctx, dep, applyOptions)
				}, &checked{}},
			{objKey{KindService, ns, *svc.Name}, svc,
				func() (metav1.Object, error) { return r.svcs.Services(ns).Get(*svc.Name) },
				func(ctx context.Context) (metav1.Object, error) {
					return r.opts.Kube.CoreV1().Services(ns).Get(ctx, *svc.Name, metav1.GetOptions{})
				},
				func(ctx context.Context) (metav1.Object, error) {
					return r.opts.Kube.CoreV1().Services(ns).Apply(ctx, svc, applyOptions)
				}, &checked{}},
		}
		if hpa := objs.HPA; hpa != nil {
			steps = append(steps, step{objKey{KindHPA, ns, *hpa.Name}, hpa,
				func() (metav1.Object, error) { return r.hpas.HorizontalPodAutoscalers(ns).Get(*hpa.Name) },
				func(ctx context.Context) (metav1.Object, error) {
					return r.opts.Kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, *hpa.Name, metav1.GetOptions{})
				},
				func(ctx context.Context) (metav1.Object, error) {
					return r.opts.Kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Apply(ctx, hpa, applyOptions)
				}, &checked{}})
		}
		if pdb := objs.PDB; pdb != nil {
			steps = append(steps, step{objKey{KindPDB, ns, *pdb.Name}, pdb,
				func() (metav1.Object, error) { return r.pdbs.PodDisruptionBudgets(ns).Get(*pdb.Name) },
				func(ctx context.Context) (metav1.Object, error) {
					return r.opts.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, *pdb.Name, metav1.GetOptions{})
				},
				func(ctx context.Context) (metav1.Object, error) {
					return r.opts.Kube.PolicyV1().PodDisruptionBudgets(ns).Apply(ctx, pdb, applyOptions)
				}, &checked{}})
		}
		// All or nothing: an object that exists and is not ours stops
		// the Gateway before anything is applied.
		for i := range steps {
			if err := r.check(ctx, steps[i]); err != nil {
				return nil, err
			}
		}
		for _, st := range steps {
			want[st.key] = true
			if st.state.upToDate {
				continue
			}
			if err := r.apply(ctx, st); err != nil {
				return changed, err
			}
			changed = append(changed, "applied "+st.key.kind+" "+st.key.name)
		}
	}
	var stale []objKey
	var uids []types.UID
	r.eachOwned(key.Namespace, key.Name, func(k objKey, m metav1.Object) {
		if !want[k] {
			stale = append(stale, k)
			uids = append(uids, m.GetUID())
		}
	})
	for i, k := range stale {
		if err := r.delete(ctx, k, uids[i]); err != nil {
			return changed, err
		}
		changed = append(changed, "deleted "+k.kind+" "+k.name)
	}
	return changed, nil
}

var applyOptions = metav1.ApplyOptions{FieldManager: FieldManager, Force: true}

// ours reports whether gw's class is served by this controller.
func (r *run) ours(gw *gwv1.Gateway) bool {
	gc, err := r.classes.Get(string(gw.Spec.GatewayClassName))
	return err == nil && gc.Spec.ControllerName == ControllerName
}

// step is one object to apply.
type step struct {
	key    objKey
	cfg    any
	cached func() (metav1.Object, error)
	get    func(context.Context) (metav1.Object, error)
	apply  func(context.Context) (metav1.Object, error)
	state  *checked
}

// checked is what check found.
type checked struct {
	hash     string
	upToDate bool
}

// check hashes st's apply configuration and decides whether it must be
// applied: not when what was last applied is the same and the object has
// not changed since (its resourceVersion, from the cache, or from the API
// server when the cache has not caught up). An existing object without
// ManagedLabel is not taken over (a permanent error).
func (r *run) check(ctx context.Context, st step) error {
	raw, err := json.Marshal(st.cfg)
	if err != nil {
		return permanent{fmt.Errorf("%s %s: %w", st.key.kind, st.key.name, err)}
	}
	sum := sha256.Sum256(raw)
	st.state.hash = string(sum[:])
	r.mu.Lock()
	prev, seen := r.applied[st.key]
	r.mu.Unlock()
	same := seen && prev.hash == st.state.hash
	cur, err := st.cached()
	if err == nil && (!same || prev.rv == cur.GetResourceVersion()) {
		// Cached objects are managed ones.
		st.state.upToDate = same
		return nil
	}
	existing, err := st.get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get %s %s: %w", st.key.kind, st.key.name, err)
	case existing.GetLabels()[ManagedLabel] != ManagedValue:
		return permanent{fmt.Errorf("%s %s exists and is not managed by %s (label %s): left alone",
			st.key.kind, st.key.name, FieldManager, ManagedLabel)}
	}
	st.state.upToDate = same && prev.rv == existing.GetResourceVersion()
	return nil
}

// apply server-side applies st and remembers what it applied.
func (r *run) apply(ctx context.Context, st step) error {
	out, err := st.apply(ctx)
	if err != nil {
		return fmt.Errorf("apply %s %s: %w", st.key.kind, st.key.name, err)
	}
	r.mu.Lock()
	r.applied[st.key] = applied{hash: st.state.hash, rv: out.GetResourceVersion()}
	r.mu.Unlock()
	return nil
}

// delete deletes an object made, if it is still the one seen (uid).
func (r *run) delete(ctx context.Context, k objKey, uid types.UID) error {
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	var err error
	switch k.kind {
	case KindServiceAccount:
		err = r.opts.Kube.CoreV1().ServiceAccounts(k.namespace).Delete(ctx, k.name, opts)
	case KindDeployment:
		err = r.opts.Kube.AppsV1().Deployments(k.namespace).Delete(ctx, k.name, opts)
	case KindService:
		err = r.opts.Kube.CoreV1().Services(k.namespace).Delete(ctx, k.name, opts)
	case KindHPA:
		err = r.opts.Kube.AutoscalingV2().HorizontalPodAutoscalers(k.namespace).Delete(ctx, k.name, opts)
	case KindPDB:
		err = r.opts.Kube.PolicyV1().PodDisruptionBudgets(k.namespace).Delete(ctx, k.name, opts)
	}
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete %s %s: %w", k.kind, k.name, err)
	}
	r.mu.Lock()
	delete(r.applied, k)
	r.mu.Unlock()
	return nil
}

// eachOwned calls fn for each cached object made that a Gateway owns: of
// Gateway namespace/name, or of every Gateway when name is "".
func (r *run) eachOwned(namespace, name string, fn func(objKey, metav1.Object)) {
	add := func(kind string, ms []metav1.Object) {
		for _, m := range ms {
			if owner, ok := ownerGateway(m); ok && (name == "" || owner == name) {
				fn(objKey{kind, m.GetNamespace(), m.GetName()}, m)
			}
		}
	}
	all := labels.Everything()
	sas, _ := r.sas.ServiceAccounts(namespace).List(all)
	add(KindServiceAccount, metas(sas))
	deps, _ := r.deps.Deployments(namespace).List(all)
	add(KindDeployment, metas(deps))
	svcs, _ := r.svcs.Services(namespace).List(all)
	add(KindService, metas(svcs))
	hpas, _ := r.hpas.HorizontalPodAutoscalers(namespace).List(all)
	add(KindHPA, metas(hpas))
	pdbs, _ := r.pdbs.PodDisruptionBudgets(namespace).List(all)
	add(KindPDB, metas(pdbs))
}

// overlays returns the patches of gw's objects, in the order istiod
// applies them: its class's defaults ConfigMap (the oldest of the system
// namespace labelled ClassDefaultsLabel=CLASS), then its parametersRef
// ConfigMap. A missing parametersRef ConfigMap is a permanent error: its
// creation reconciles gw again (watchConfigMaps).
func (r *run) overlays(ctx context.Context, gw *gwv1.Gateway) ([]Overlay, error) {
	var out []Overlay
	if name := r.classDefaults(string(gw.Spec.GatewayClassName)); name != "" {
		cm, err := r.opts.Kube.CoreV1().ConfigMaps(r.opts.SystemNamespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			// Deleted meanwhile: its deletion reconciles gw again.
		case err != nil:
			return nil, fmt.Errorf("class defaults ConfigMap %s/%s: %w", r.opts.SystemNamespace, name, err)
		default:
			out = append(out, Overlay{Source: "class defaults ConfigMap " + r.opts.SystemNamespace + "/" + name, Data: cm.Data})
		}
	}
	name, err := Parameters(gw)
	if err != nil || name == "" {
		return out, permanentIf(err)
	}
	cm, err := r.opts.Kube.CoreV1().ConfigMaps(gw.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, permanent{fmt.Errorf("infrastructure.parametersRef: ConfigMap %s/%s not found", gw.Namespace, name)}
	}
	if err != nil {
		return nil, fmt.Errorf("infrastructure.parametersRef: %w", err)
	}
	return append(out, Overlay{Source: "infrastructure.parametersRef ConfigMap " + gw.Namespace + "/" + name, Data: cm.Data}), nil
}

func permanentIf(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

func metas[T metav1.Object](in []T) []metav1.Object {
	out := make([]metav1.Object, 0, len(in))
	for _, o := range in {
		out = append(out, o)
	}
	return out
}
