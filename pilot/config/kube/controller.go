// Package kube is the Kubernetes config source: informers on the Istio
// CRDs (networking.istio.io and security.istio.io, version v1) that keep a
// memory.Store current, started per kind once its CRD exists, and a watcher
// of the mesh ConfigMap.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/internal/ready"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
	"github.com/meshpilot/meshpilot/pilot/config/support"
	kubereg "github.com/meshpilot/meshpilot/serviceregistry/kube"
)

// crdResource is the CustomResourceDefinition resource, watched (metadata
// only) to notice Istio CRDs being installed.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Options configure a Controller.
type Options struct {
	// Istio lists and watches the Istio kinds.
	Istio istioclient.Interface
	// Metadata watches CustomResourceDefinitions.
	Metadata metadata.Interface
	// Store receives the objects.
	Store *memory.Store
	// Filter selects the watched namespaces (discoverySelectors); nil: all.
	Filter *kubereg.NamespaceFilter
	// OnChange is told which objects changed, once the controller is ready
	// (the initial content is in Store when WaitReady returns). It may be
	// called from several goroutines.
	OnChange func(keys []model.ConfigKey)
	// SetUnsupportedFields is given the number of fields set in the
	// selected objects that meshpilot does not (or only partly) carry out,
	// after every change (the gauge meshpilot_config_unsupported_fields);
	// nil: not reported. Each object version's such fields are logged once.
	SetUnsupportedFields func(float64)
	Log                  *slog.Logger
}

// Controller keeps Store equal to the Istio objects in the cluster.
type Controller struct {
	opts       Options
	factory    istioinformers.SharedInformerFactory
	crdFactory metadatainformer.SharedInformerFactory
	crds       cache.SharedIndexInformer
	// unsupported logs each object version's unsupported fields once.
	unsupported *support.Reporter

	mu      sync.Mutex
	started map[model.Kind]cache.SharedIndexInformer
	missing map[model.Kind]bool
	runCtx  context.Context
	ready   *ready.Signal
	isReady bool
	// resync serialises full re-evaluations after a filter change.
	resync sync.Mutex
}

// New builds the controller; nothing runs until Run.
func New(opts Options) (*Controller, error) {
	if opts.Istio == nil || opts.Metadata == nil || opts.Store == nil {
		return nil, errors.New("istio config controller: Istio, Metadata and Store are required")
	}
	if opts.Filter == nil {
		opts.Filter = kubereg.NewNamespaceFilter()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.OnChange == nil {
		opts.OnChange = func([]model.ConfigKey) {}
	}
	c := &Controller{
		opts:       opts,
		factory:    istioinformers.NewSharedInformerFactory(opts.Istio, 0),
		crdFactory: metadatainformer.NewSharedInformerFactory(opts.Metadata, 0),
		started:    map[model.Kind]cache.SharedIndexInformer{},
		missing:    map[model.Kind]bool{},
		ready:      ready.New("istio config controller"),
	}
	c.unsupported = support.NewReporter(opts.Log, opts.SetUnsupportedFields)
	c.crds = c.crdFactory.ForResource(crdResource).Informer()
	if _, err := c.crds.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onCRD(obj) },
		UpdateFunc: func(_, obj any) { c.onCRD(obj) },
	}); err != nil {
		return nil, fmt.Errorf("istio config controller: CRD handler: %w", err)
	}
	opts.Filter.Subscribe(c.resyncAll)
	return c, nil
}

// Run watches CRDs, starts an informer for every Istio kind whose CRD is
// installed (logging one line per missing CRD, then starting it when the
// CRD appears), marks the controller ready once those informers synced,
// and follows changes until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	c.runCtx = ctx
	c.mu.Unlock()
	c.crdFactory.Start(ctx.Done())
	defer func() {
		c.crdFactory.Shutdown()
		c.factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), c.crds.HasSynced) {
		return fmt.Errorf("istio config controller: CustomResourceDefinitions not synced: %w", context.Cause(ctx))
	}
	present := map[string]bool{}
	for _, o := range c.crds.GetStore().List() {
		if m, ok := o.(metav1.Object); ok {
			present[m.GetName()] = true
		}
	}
	var synced []cache.InformerSynced
	for _, k := range kinds {
		if !present[k.crd] {
			c.mu.Lock()
			c.missing[k.kind] = true
			c.mu.Unlock()
			c.opts.Log.Warn("Istio CRD not installed; its kind is ignored until the CRD is applied",
				"crd", k.crd, "kind", k.kind)
			continue
		}
		synced = append(synced, c.startKind(k).HasSynced)
	}
	// A CRD created while the loop above ran was not yet marked missing
	// when its event arrived: look again.
	for _, o := range c.crds.GetStore().List() {
		c.onCRD(o)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("istio config controller: informers not synced: %w", context.Cause(ctx))
	}
	// Objects seen before a filter was known: re-evaluate once.
	c.reevaluate()
	c.mu.Lock()
	c.isReady = true
	c.ready.Mark()
	c.mu.Unlock()
	c.opts.Log.Info("Istio config synced", "kinds", len(synced))
	<-ctx.Done()
	return nil
}

// WaitReady blocks until the installed kinds are synced into Store.
func (c *Controller) WaitReady(ctx context.Context) error { return c.ready.Wait(ctx) }

// HasSynced reports whether WaitReady would return at once.
func (c *Controller) HasSynced() bool { return c.ready.Done() }

// Watching returns the kinds whose informers run, sorted.
func (c *Controller) Watching() []model.Kind {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]model.Kind, 0, len(c.started))
	for k := range c.started {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// onCRD starts the informer of a kind whose CRD appeared after Run began.
func (c *Controller) onCRD(obj any) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	for _, k := range kinds {
		if k.crd != m.GetName() {
			continue
		}
		c.mu.Lock()
		wasMissing := c.missing[k.kind]
		delete(c.missing, k.kind)
		c.mu.Unlock()
		if wasMissing {
			c.opts.Log.Info("Istio CRD installed; watching its kind", "crd", k.crd, "kind", k.kind)
			c.startKind(k)
		}
	}
}

// startKind creates (once) and starts the informer of k.
func (c *Controller) startKind(k kindInfo) cache.SharedIndexInformer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if inf := c.started[k.kind]; inf != nil {
		return inf
	}
	inf := k.informer(c.factory)
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.upsert(k, obj) },
		UpdateFunc: func(_, obj any) { c.upsert(k, obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if m, ok := obj.(metav1.Object); ok {
				c.remove(k.kind, m.GetNamespace(), m.GetName())
			}
		},
	})
	if err != nil {
		c.opts.Log.Error("cannot watch Istio kind", "kind", k.kind, "error", err)
	}
	c.started[k.kind] = inf
	if c.runCtx != nil {
		c.factory.Start(c.runCtx.Done())
	}
	return inf
}

func (c *Controller) upsert(k kindInfo, obj any) {
	cfg, ok := k.convert(obj)
	if !ok {
		return
	}
	if !c.opts.Filter.Selected(cfg.Namespace) {
		c.remove(k.kind, cfg.Namespace, cfg.Name)
		return
	}
	c.accepted(&cfg)
	if c.opts.Store.Apply(cfg) {
		c.notify([]model.ConfigKey{cfg.Key()})
	}
}

// accepted reports the unsupported fields of cfg (once per resourceVersion).
func (c *Controller) accepted(cfg *model.Config) {
	c.unsupported.Accept(support.Object{Kind: string(cfg.Kind), Namespace: cfg.Namespace, Name: cfg.Name,
		Version: cfg.ResourceVersion, Source: cfg.Source, Spec: cfg.Spec})
}

func (c *Controller) remove(kind model.Kind, ns, name string) {
	c.unsupported.Remove(string(kind), ns, name)
	if c.opts.Store.Delete(kind, ns, name) {
		c.notify([]model.ConfigKey{{Kind: kind, Namespace: ns, Name: name}})
	}
}

func (c *Controller) notify(keys []model.ConfigKey) {
	c.mu.Lock()
	synced := c.isReady
	c.mu.Unlock()
	if synced && len(keys) > 0 {
		c.opts.OnChange(keys)
	}
}

// resyncAll re-applies the namespace filter to every watched object.
func (c *Controller) resyncAll() {
	if keys := c.reevaluate(); len(keys) > 0 {
		c.notify(keys)
	}
}

// reevaluate makes Store hold exactly the selected objects of the informers'
// caches and returns what changed.
func (c *Controller) reevaluate() []model.ConfigKey {
	c.resync.Lock()
	defer c.resync.Unlock()
	c.mu.Lock()
	infs := make(map[model.Kind]cache.SharedIndexInformer, len(c.started))
	for k, inf := range c.started {
		infs[k] = inf
	}
	c.mu.Unlock()
	var changed []model.ConfigKey
	for _, k := range kinds {
		inf := infs[k.kind]
		if inf == nil {
			continue
		}
		want := map[[2]string]bool{}
		for _, obj := range inf.GetStore().List() {
			cfg, ok := k.convert(obj)
			if !ok || !c.opts.Filter.Selected(cfg.Namespace) {
				continue
			}
			want[[2]string{cfg.Namespace, cfg.Name}] = true
			c.accepted(&cfg)
			if c.opts.Store.Apply(cfg) {
				changed = append(changed, cfg.Key())
			}
		}
		for _, have := range c.opts.Store.List(k.kind) {
			if want[[2]string{have.Namespace, have.Name}] {
				continue
			}
			c.unsupported.Remove(string(k.kind), have.Namespace, have.Name)
			if c.opts.Store.Delete(k.kind, have.Namespace, have.Name) {
				changed = append(changed, have.Key())
			}
		}
	}
	return changed
}
