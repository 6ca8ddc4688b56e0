package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/internal/ready"
	"github.com/meshpilot/meshpilot/model"
)

// indexByService indexes EndpointSlices by "namespace/service-name".
const indexByService = "service"

// ControllerOptions configure a Controller.
type ControllerOptions struct {
	// Client reads the cluster.
	Client kubernetes.Interface
	// Domain is the cluster DNS suffix ("cluster.local").
	Domain string
	// Shard is the EndpointIndex shard written; empty means ShardKubernetes.
	Shard string
	// ClusterID names the cluster; its endpoints carry it.
	ClusterID string
	// Endpoints receives the services' endpoints.
	Endpoints *model.EndpointIndex
	// Filter selects the watched namespaces (discoverySelectors); nil watches all.
	Filter *NamespaceFilter
	// Networks resolves endpoint networks from namespace labels and
	// meshNetworks; nil reads the pods' network label alone.
	Networks *Networks
	// OnChange is told, from the controller's goroutine, what each batch of
	// events changed. Endpoint-only changes come as KindEndpoints keys.
	OnChange func(model.RegistryChanges)
	// OnPodsChanged, when set, is called from the controller's goroutine
	// after a batch of events that changed what a Pod contributes as a
	// workload (added, removed, labels, IP, readiness, service account,
	// node), a node's labels, or the selected namespaces: consumers that
	// select Pods themselves (ServiceEntry workloadSelector) recompute then.
	OnPodsChanged func()
	// OnSynced, when set, is called from Run once the informers' caches
	// synced, before the registry is computed from them; an error ends Run
	// (with that error) without computing anything. A controller that
	// replaces another of the same cluster and shard (a rotated kubeconfig)
	// stops the old one there and calls Inherit, so the cluster's services
	// and endpoints never leave the model and only differences are reported.
	OnSynced func() error
	// Log receives the controller's messages.
	Log *slog.Logger
}

// Controller is the Kubernetes service registry fed by shared informers on
// Services, EndpointSlices, Pods, Nodes and Namespaces. As istiod, it reads
// endpoints from EndpointSlices only: v1 Endpoints are deprecated since
// Kubernetes 1.33 (watching them fills both logs with warnings), and the
// API server's mirroring controller turns custom Endpoints into slices. Each event
// marks the services it can affect; one goroutine recomputes only those and
// reports the changes. It implements model.ServiceDiscovery.
type Controller struct {
	opts    ControllerOptions
	reg     *Registry
	factory informers.SharedInformerFactory

	services corelisters.ServiceLister
	pods     corelisters.PodLister
	nodes    corelisters.NodeLister
	slices   cache.Indexer
	synced   []cache.InformerSynced

	mu    sync.Mutex
	dirty map[nsName]struct{}
	all   bool
	// podsDirty is set when Pods changed since the last process (OnPodsChanged).
	podsDirty bool
	wake      chan struct{}
	ready     *ready.Signal
}

var _ model.ServiceDiscovery = (*Controller)(nil)

// NewController builds the informers (nothing runs until Run).
func NewController(opts ControllerOptions) (*Controller, error) {
	if opts.Client == nil || opts.Endpoints == nil {
		return nil, errors.New("kube controller: Client and Endpoints are required")
	}
	if opts.Shard == "" {
		opts.Shard = ShardKubernetes
	}
	if opts.Filter == nil {
		opts.Filter = NewNamespaceFilter()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.OnChange == nil {
		opts.OnChange = func(model.RegistryChanges) {}
	}
	f := informers.NewSharedInformerFactoryWithOptions(opts.Client, 0, informers.WithTransform(stripManagedFields))
	c := &Controller{
		opts:    opts,
		reg:     NewRegistryForShard(opts.Domain, opts.Shard, opts.Endpoints, opts.Log),
		factory: f,
		dirty:   map[nsName]struct{}{},
		wake:    make(chan struct{}, 1),
		ready:   ready.New("kube controller"),
	}
	svcInf := f.Core().V1().Services()
	podInf := f.Core().V1().Pods()
	nodeInf := f.Core().V1().Nodes()
	nsInf := f.Core().V1().Namespaces()
	sliceInf := f.Discovery().V1().EndpointSlices()
	c.services, c.pods, c.nodes = svcInf.Lister(), podInf.Lister(), nodeInf.Lister()
	if err := sliceInf.Informer().AddIndexers(cache.Indexers{indexByService: sliceServiceIndex}); err != nil {
		return nil, fmt.Errorf("kube controller: EndpointSlice index: %w", err)
	}
	c.slices = sliceInf.Informer().GetIndexer()

	handlers := []struct {
		inf cache.SharedIndexInformer
		fn  func(old, cur any)
	}{
		{svcInf.Informer(), c.onService},
		{sliceInf.Informer(), c.onSlice},
		{podInf.Informer(), c.onPod},
		{nodeInf.Informer(), c.onNode},
		{nsInf.Informer(), c.onNamespace},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(eventHandler(h.fn)); err != nil {
			return nil, fmt.Errorf("kube controller: add event handler: %w", err)
		}
		c.synced = append(c.synced, h.inf.HasSynced)
	}
	opts.Filter.Subscribe(c.markAll)
	return c, nil
}

// eventHandler turns add/update/delete into fn(old, cur): add has old nil,
// delete has cur nil; tombstones are unwrapped.
func eventHandler(fn func(old, cur any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { fn(nil, obj) },
		UpdateFunc: fn,
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			fn(obj, nil)
		},
	}
}

// stripManagedFields drops metadata.managedFields (server-side apply's
// bookkeeping, often the largest part of a Pod) before the informer caches
// keep an object: nothing here reads them. Every cluster's caches, remote
// ones included, hold less.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

func sliceServiceIndex(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[LabelServiceName] == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + s.Labels[LabelServiceName]}, nil
}

// Run starts the informers, waits for their caches, computes every service
// once, then follows events until ctx is done. It returns after the
// informers stopped.
func (c *Controller) Run(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("kube controller: caches not synced: %w", context.Cause(ctx))
	}
	if c.opts.OnSynced != nil {
		if err := c.opts.OnSynced(); err != nil {
			return err
		}
	}
	c.markAll()
	c.process()
	c.ready.Mark()
	c.opts.Log.Info("kubernetes registry synced", "services", len(c.reg.Services()))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
			c.process()
		}
	}
}

// Inherit makes the services old holds this controller's starting point, so
// its first computation reports only what differs from them. Call it before
// that computation (from OnSynced) and after old stopped writing.
func (c *Controller) Inherit(old *Controller) {
	c.reg.replaceMu.Lock()
	defer c.reg.replaceMu.Unlock()
	c.reg.set.Set(old.reg.set.ByHost())
}

// Clear removes every service and endpoint the controller contributed and
// reports the change, for a cluster that leaves; call it after Run returned.
func (c *Controller) Clear() model.RegistryChanges {
	return c.reg.Replace(Objects{})
}

// ClusterID is the cluster the controller watches.
func (c *Controller) ClusterID() string { return c.opts.ClusterID }

// WaitReady blocks until the caches synced and the registry holds every
// service, or ctx ends.
func (c *Controller) WaitReady(ctx context.Context) error { return c.ready.Wait(ctx) }

// HasSynced reports whether WaitReady would return at once.
func (c *Controller) HasSynced() bool { return c.ready.Done() }

// Services returns every service, sorted by hostname (an immutable snapshot).
func (c *Controller) Services() []*model.Service { return c.reg.Services() }

// Service returns the service with hostname, or nil.
func (c *Controller) Service(hostname string) *model.Service { return c.reg.Service(hostname) }

func (c *Controller) mark(keys ...nsName) {
	c.mu.Lock()
	for _, k := range keys {
		c.dirty[k] = struct{}{}
	}
	c.mu.Unlock()
	c.signal()
}

func (c *Controller) markAll() {
	c.mu.Lock()
	c.all = true
	c.podsDirty = true
	c.mu.Unlock()
	c.signal()
}

func (c *Controller) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// process recomputes the marked services and reports what changed.
func (c *Controller) process() {
	c.mu.Lock()
	dirty, all, pods := c.dirty, c.all, c.podsDirty
	c.dirty, c.all, c.podsDirty = map[nsName]struct{}{}, false, false
	c.mu.Unlock()
	if all {
		dirty = c.allKeys()
	}
	if len(dirty) > 0 {
		if changes := c.reg.Apply(c.states(dirty)); !changes.Empty() {
			c.opts.OnChange(changes)
		}
	}
	if pods && c.opts.OnPodsChanged != nil {
		c.opts.OnPodsChanged()
	}
}

// markPods records that Pods changed, for OnPodsChanged.
func (c *Controller) markPods() {
	c.mu.Lock()
	c.podsDirty = true
	c.mu.Unlock()
	c.signal()
}

// allKeys is every service in the cache and every service in the registry.
func (c *Controller) allKeys() map[nsName]struct{} {
	keys := map[nsName]struct{}{}
	svcs, _ := c.services.List(labels.Everything())
	for _, s := range svcs {
		keys[nsName{s.Namespace, s.Name}] = struct{}{}
	}
	for _, s := range c.reg.Services() {
		keys[nsName{s.Namespace, s.Name}] = struct{}{}
	}
	return keys
}

// states computes the current state of each key, building one endpoint
// index per namespace.
func (c *Controller) states(dirty map[nsName]struct{}) []ServiceState {
	byNS := map[string][]string{}
	for k := range dirty {
		byNS[k.namespace] = append(byNS[k.namespace], k.name)
	}
	nsList := make([]string, 0, len(byNS))
	for ns := range byNS {
		nsList = append(nsList, ns)
	}
	sort.Strings(nsList)
	nodes, _ := c.nodes.List(labels.Everything())
	var out []ServiceState
	for _, ns := range nsList {
		names := byNS[ns]
		sort.Strings(names)
		if !c.opts.Filter.Selected(ns) {
			for _, n := range names {
				out = append(out, ServiceState{Hostname: ServiceHostname(n, ns, c.opts.Domain)})
			}
			continue
		}
		objs := Objects{Nodes: nodes}
		pods := podSet{lister: c.pods, ns: ns, byName: map[string]*corev1.Pod{}}
		var svcs []*corev1.Service
		for _, n := range names {
			svc, err := c.services.Services(ns).Get(n)
			if err != nil {
				if !apierrors.IsNotFound(err) {
					c.opts.Log.Warn("service lookup failed", "service", ns+"/"+n, "error", err)
				}
				svcs = append(svcs, nil)
				continue
			}
			svcs = append(svcs, svc)
			items, _ := c.slices.ByIndex(indexByService, ns+"/"+n)
			for _, it := range items {
				sl := it.(*discoveryv1.EndpointSlice)
				objs.EndpointSlices = append(objs.EndpointSlices, sl)
				for _, e := range sl.Endpoints {
					pods.addRef(e.TargetRef)
				}
			}
			if len(items) == 0 && len(svc.Spec.Selector) > 0 {
				pods.addSelected(svc.Spec.Selector)
			}
		}
		objs.Pods = pods.list()
		idx := NewClusterIndex(objs, c.opts.ClusterID).WithNetworks(c.opts.Networks)
		for i, n := range names {
			st := ServiceState{Hostname: ServiceHostname(n, ns, c.opts.Domain)}
			if svc := svcs[i]; svc != nil {
				st.Service = ConvertService(svc, c.opts.Domain)
				st.Service.ClusterID = c.opts.ClusterID
				st.Endpoints = idx.Endpoints(svc)
			}
			out = append(out, st)
		}
	}
	return out
}

// podSet collects the pods of one namespace that endpoint conversion needs:
// those endpoints reference, and those a selector picks (no slices).
type podSet struct {
	lister corelisters.PodLister
	ns     string
	byName map[string]*corev1.Pod
}

func (p podSet) addRef(ref *corev1.ObjectReference) {
	if ref == nil || (ref.Kind != "" && ref.Kind != "Pod") || (ref.Namespace != "" && ref.Namespace != p.ns) {
		return
	}
	if _, ok := p.byName[ref.Name]; ok {
		return
	}
	if pod, err := p.lister.Pods(p.ns).Get(ref.Name); err == nil {
		p.byName[ref.Name] = pod
	}
}

func (p podSet) addSelected(selector map[string]string) {
	pods, _ := p.lister.Pods(p.ns).List(labels.SelectorFromSet(selector))
	for _, pod := range pods {
		p.byName[pod.Name] = pod
	}
}

func (p podSet) list() []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(p.byName))
	for _, pod := range p.byName {
		out = append(out, pod)
	}
	return out
}
