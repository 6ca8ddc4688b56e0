package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
	gwinformersv1 "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions/apis/v1"
	gwlisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway/deploy"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
)

// Default write rate of the status writer. Higher than pilot/config/kube's
// (20): Gateway API users and their tools wait on this status (1,000
// routes take 50 s at 20 a second), and only objects whose status changed
// are written, once each per translation.
const (
	DefaultStatusQPS   = 500
	DefaultStatusBurst = 500
	// DefaultStatusWorkers writes this many statuses at once: one writer
	// waits out an API server round trip per object, so 1,000 routes took
	// seconds one after another (BENCHMARKS.md, issue 19, fourth round).
	// istiod's PILOT_STATUS_MAX_WORKERS defaults to 100; more than the
	// API server can serve at once only queues there.
	DefaultStatusWorkers = 16
)

// StatusRestConfig is cfg with client-go's rate limit set to a status
// writer's (qps and burst; zero for this writer's defaults), as istiod
// builds its status client from PILOT_STATUS_QPS and PILOT_STATUS_BURST: a
// shared client's limit (pilot-discovery's is 100/s) would otherwise cap
// status writes below them.
func StatusRestConfig(cfg *rest.Config, qps float64, burst int) *rest.Config {
	out := rest.CopyConfig(cfg)
	if qps == 0 {
		qps, burst = DefaultStatusQPS, DefaultStatusBurst
	}
	out.QPS, out.Burst = float32(qps), max(burst, 1)
	out.RateLimiter = nil
	return out
}

// Options configure a Controller.
type Options struct {
	// Client lists and watches the Gateway API kinds and writes their status.
	Client gwclient.Interface
	// Store receives the translated Istio Gateways and VirtualServices;
	// the controller adds, replaces and deletes only those it made.
	Store *memory.Store
	// OnChange is told which configs of Store changed (after the initial
	// content, which is in Store when WaitReady returns).
	OnChange func(keys []model.ConfigKey)
	// Service, Secret and Namespaces are Input's lookups (backendRefs and
	// addresses, certificateRefs, allowedRoutes selectors); Resync after
	// what they see changed.
	Service func(hostname string) *model.Service
	Secret  func(namespace, name string) bool
	// ConfigMapCA is Input's check of a BackendTLSPolicy's CA ConfigMap;
	// Resync after a ConfigMap changed.
	ConfigMapCA  func(namespace, name string) error
	Namespaces   func(name string) map[string]string
	DomainSuffix string
	// QPS and Burst bound status writes; zero takes the defaults.
	QPS   float64
	Burst int
	// StatusClient writes status; nil writes with Client. Its own rate
	// limit (client-go's, from the rest.Config) must allow QPS and Burst,
	// or it caps the writer below them: build it from StatusRestConfig.
	StatusClient gwclient.Interface
	// Workers is how many status writes may be in flight at once
	// (PILOT_STATUS_MAX_WORKERS, as istiod); zero takes DefaultStatusWorkers.
	Workers int
	Log     *slog.Logger
}

// Controller watches GatewayClasses, Gateways, HTTPRoutes and
// ReferenceGrants (v1), and GRPCRoutes, TLSRoutes, TCPRoutes, UDPRoutes and
// ListenerSets and BackendTLSPolicies (v1) when the cluster serves them, keeps their translation in Store, and
// writes their status while WriteStatus runs (on the leader).
type Controller struct {
	opts     Options
	factory  gwinformers.SharedInformerFactory
	classes  gwlisters.GatewayClassLister
	gateways gwlisters.GatewayLister
	routes   gwlisters.HTTPRouteLister
	grants   gwlisters.ReferenceGrantLister
	// The optional route kinds' listers, nil when not served; set by Run
	// before ready is closed.
	grpcRoutes  gwlisters.GRPCRouteLister
	tlsRoutes   gwlisters.TLSRouteLister
	tcpRoutes   gwlisters.TCPRouteLister
	udpRoutes   gwlisters.UDPRouteLister
	tlsPolicies gwlisters.BackendTLSPolicyLister
	// listenerSets is nil when the cluster does not serve ListenerSet.
	listenerSets gwlisters.ListenerSetLister
	handler      cache.ResourceEventHandler
	synced       []cache.InformerSynced
	limiter      *rate.Limiter

	// kick asks for a translation; statusKick for a status pass.
	kick, statusKick chan struct{}
	ready            chan struct{}
	// translations counts translations made (for tests).
	translations atomic.Int64
	// rules keeps the HTTPRoutes' translated rules between translations;
	// rulesStale says something else changed since (Resync), so it is
	// dropped before the next.
	rules      *RuleMemo
	rulesStale atomic.Bool
	// written holds, per object whose status the last pass wrote or
	// found in flight, the resourceVersion it was written from.
	writtenMu sync.Mutex
	written   map[writeKey]string

	mu    sync.Mutex
	out   *Output
	owned map[model.ConfigKey]bool
}

// NewController builds the controller; nothing runs until Run.
func NewController(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Store == nil {
		return nil, errors.New("gateway api controller: Client and Store are required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.OnChange == nil {
		opts.OnChange = func([]model.ConfigKey) {}
	}
	if opts.QPS == 0 {
		opts.QPS, opts.Burst = DefaultStatusQPS, DefaultStatusBurst
	}
	if opts.StatusClient == nil {
		opts.StatusClient = opts.Client
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultStatusWorkers
	}
	f := gwinformers.NewSharedInformerFactory(opts.Client, 0)
	c := &Controller{
		opts: opts, factory: f,
		limiter:    rate.NewLimiter(rate.Limit(opts.QPS), max(opts.Burst, 1)),
		kick:       make(chan struct{}, 1),
		statusKick: make(chan struct{}, 1),
		ready:      make(chan struct{}),
		owned:      map[model.ConfigKey]bool{},
	}
	v1 := f.Gateway().V1()
	informers := []cache.SharedIndexInformer{
		v1.GatewayClasses().Informer(), v1.Gateways().Informer(), v1.HTTPRoutes().Informer(), v1.ReferenceGrants().Informer(),
	}
	c.classes, c.gateways, c.routes, c.grants = v1.GatewayClasses().Lister(), v1.Gateways().Lister(), v1.HTTPRoutes().Lister(), v1.ReferenceGrants().Lister()
	c.handler = c.eventHandler(c.Resync)
	for _, inf := range informers {
		handler := c.handler
		if inf == v1.HTTPRoutes().Informer() {
			// HTTPRoute changes keep the rules of the other routes.
			handler = c.eventHandler(c.resyncRoutes)
		}
		if err := c.watch(inf, handler); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// eventHandler calls resync for each change of an object but a change of
// its status alone, which brings a status pass.
func (c *Controller) eventHandler(resync func()) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { resync() },
		UpdateFunc: func(old, cur any) {
			// Each status write comes back as an update: translating
			// again for it would cost a whole translation per written
			// object. A status pass is enough (another controller may
			// have written over our parents).
			if deploy.StatusOnlyUpdate(old, cur) {
				c.kickStatus()
				return
			}
			resync()
		},
		DeleteFunc: func(any) { resync() },
	}
}

func (c *Controller) watch(inf cache.SharedIndexInformer, handler cache.ResourceEventHandler) error {
	if _, err := inf.AddEventHandler(handler); err != nil {
		return fmt.Errorf("gateway api controller: handler: %w", err)
	}
	c.synced = append(c.synced, inf.HasSynced)
	return nil
}

// watchOptionalKinds watches the route kinds of v1 beyond HTTPRoute,
// ListenerSet and BackendTLSPolicy, that the cluster serves (older CRD bundles lack some, and an informer of a
// kind not served would never sync).
func (c *Controller) watchOptionalKinds() error {
	served := map[string]bool{}
	list, err := c.opts.Client.Discovery().ServerResourcesForGroupVersion(gwv1.GroupVersion.String())
	if err != nil {
		c.opts.Log.Warn("gateway api: discovery failed; only GatewayClass, Gateway, HTTPRoute and ReferenceGrant are watched", "error", err)
		return nil
	}
	for _, r := range list.APIResources {
		served[r.Kind] = true
	}
	v1 := c.factory.Gateway().V1()
	var watched []string
	add := func(kind string, inf cache.SharedIndexInformer, set func()) error {
		if !served[kind] {
			return nil
		}
		set()
		watched = append(watched, kind)
		return c.watch(inf, c.handler)
	}
	errs := []error{
		add(KindGRPCRoute, v1.GRPCRoutes().Informer(), func() { c.grpcRoutes = v1.GRPCRoutes().Lister() }),
		add(KindTLSRoute, v1.TLSRoutes().Informer(), func() { c.tlsRoutes = v1.TLSRoutes().Lister() }),
		add(KindTCPRoute, v1.TCPRoutes().Informer(), func() { c.tcpRoutes = v1.TCPRoutes().Lister() }),
		add(KindUDPRoute, v1.UDPRoutes().Informer(), func() { c.udpRoutes = v1.UDPRoutes().Lister() }),
		add(KindBackendTLSPolicy, v1.BackendTLSPolicies().Informer(), func() { c.tlsPolicies = v1.BackendTLSPolicies().Lister() }),
		add(KindListenerSet, v1.ListenerSets().Informer(), func() { c.listenerSets = v1.ListenerSets().Lister() }),
	}
	c.opts.Log.Info("gateway api: optional kinds watched", "kinds", watched)
	return errors.Join(errs...)
}

// GatewayInformers returns the informers of Gateways and GatewayClasses,
// for another controller to share (one watch of each kind); Run starts
// them.
func (c *Controller) GatewayInformers() (gwinformersv1.GatewayInformer, gwinformersv1.GatewayClassInformer) {
	v1 := c.factory.Gateway().V1()
	return v1.Gateways(), v1.GatewayClasses()
}

// ListenerSetInformer returns the informer of ListenerSets, for another
// controller to share; call it only when the cluster serves ListenerSet
// (an informer of a kind not served never syncs). Run starts it.
func (c *Controller) ListenerSetInformer() gwinformersv1.ListenerSetInformer {
	return c.factory.Gateway().V1().ListenerSets()
}

// kickStatus asks for a status pass (coalesced with any pending one).
func (c *Controller) kickStatus() {
	select {
	case c.statusKick <- struct{}{}:
	default:
	}
}

// Resync asks for a new translation (coalesced with any pending one),
// after something the routes' rules may depend on changed.
func (c *Controller) Resync() {
	c.rulesStale.Store(true)
	c.resyncRoutes()
}

// resyncRoutes asks for a new translation after HTTPRoutes alone
// changed: the rules of the others are kept.
func (c *Controller) resyncRoutes() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// WaitReady returns once the first translation is in Store, or ctx ends.
func (c *Controller) WaitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gateway api controller: not ready: %w", ctx.Err())
	}
}

// Run watches the kinds and translates after each burst of changes until
// ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.watchOptionalKinds(); err != nil {
		return err
	}
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("gateway api controller: caches not synced: %w", ctx.Err())
	}
	c.translate(false)
	close(c.ready)
	c.opts.Log.Info("gateway api controller ready")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
			c.translate(true)
		}
	}
}

// input lists the objects from the informers' caches.
func (c *Controller) input() (Input, error) {
	in := Input{Service: c.opts.Service, Secret: c.opts.Secret, ConfigMapCA: c.opts.ConfigMapCA, Namespaces: c.opts.Namespaces,
		DomainSuffix: c.opts.DomainSuffix, Rules: c.rules}
	var err error
	all := labels.Everything()
	if in.GatewayClasses, err = c.classes.List(all); err != nil {
		return in, err
	}
	if in.Gateways, err = c.gateways.List(all); err != nil {
		return in, err
	}
	if in.HTTPRoutes, err = c.routes.List(all); err != nil {
		return in, err
	}
	if in.ReferenceGrants, err = c.grants.List(all); err != nil {
		return in, err
	}
	if c.grpcRoutes != nil {
		if in.GRPCRoutes, err = c.grpcRoutes.List(all); err != nil {
			return in, err
		}
	}
	if c.tlsRoutes != nil {
		if in.TLSRoutes, err = c.tlsRoutes.List(all); err != nil {
			return in, err
		}
	}
	if c.tcpRoutes != nil {
		if in.TCPRoutes, err = c.tcpRoutes.List(all); err != nil {
			return in, err
		}
	}
	if c.udpRoutes != nil {
		if in.UDPRoutes, err = c.udpRoutes.List(all); err != nil {
			return in, err
		}
	}
	if c.tlsPolicies != nil {
		if in.BackendTLSPolicies, err = c.tlsPolicies.List(all); err != nil {
			return in, err
		}
	}
	if c.listenerSets != nil {
		if in.ListenerSets, err = c.listenerSets.List(all); err != nil {
			return in, err
		}
	}
	return in, nil
}

// translate replaces the configs it made in Store with a new translation
// and asks for a status pass.
func (c *Controller) translate(notify bool) {
	// Before listing: a change after this is seen by this translation or
	// marks the rules stale again for the next.
	if c.rulesStale.Swap(false) || c.rules == nil {
		c.rules = &RuleMemo{}
	}
	in, err := c.input()
	if err != nil {
		c.opts.Log.Error("gateway api: listing failed", "error", err)
		return
	}
	out := Translate(in)
	c.translations.Add(1)
	c.mu.Lock()
	var changed []model.ConfigKey
	next := make(map[model.ConfigKey]bool, len(out.Configs))
	for _, cfg := range out.Configs {
		next[cfg.Key()] = true
		if c.opts.Store.Apply(cfg) {
			changed = append(changed, cfg.Key())
		}
	}
	for k := range c.owned {
		if !next[k] && c.opts.Store.Delete(k.Kind, k.Namespace, k.Name) {
			changed = append(changed, k)
		}
	}
	c.owned, c.out = next, &out
	c.mu.Unlock()
	if len(changed) > 0 {
		c.opts.Log.Info("gateway api translated", "configs", len(out.Configs), "changed", len(changed),
			"gateways", len(out.Gateways), "httpRoutes", len(out.HTTPRoutes), "grpcRoutes", len(out.GRPCRoutes))
		if notify {
			c.opts.OnChange(changed)
		}
	}
	c.kickStatus()
}

// latest returns the last translation; nil before the first.
func (c *Controller) latest() *Output {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out
}
