// Package multicluster adds remote clusters to the service registry, as
// istiod does: Secrets labelled istio/multiCluster=true in the control
// plane's namespace hold one kubeconfig per data key, the key being the
// cluster's ID. Each remote cluster is watched by its own
// serviceregistry/kube controller (the one the local cluster uses), which
// writes its own EndpointIndex shard, so a service present in several
// clusters (same hostname, same namespace) gets the endpoints of all of
// them, each carrying its cluster.
//
// Clusters come, change and go live. A new kubeconfig for a cluster starts
// a second controller; once its caches synced it takes over from the first
// (which stops), starting from the first's services, so the cluster never
// leaves the model. A removed cluster's services and endpoints leave in one
// change.
package multicluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/internal/ready"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/serviceregistry/kube"
)

const (
	// SecretLabel marks the Secrets that hold remote clusters' kubeconfigs
	// (Istio's MultiClusterSecretLabel), with value "true".
	SecretLabel = "istio/multiCluster"
	// ClusterAnnotation on a remote secret names the cluster it is for, as
	// istioctl create-remote-secret writes it.
	ClusterAnnotation = "networking.istio.io/cluster"
	// DefaultSyncTimeout is PILOT_REMOTE_CLUSTER_TIMEOUT's default: how long
	// readiness waits for remote clusters to sync.
	DefaultSyncTimeout = 30 * time.Second
)

// ShardFor is the EndpointIndex shard the registry of remote cluster id writes.
func ShardFor(id string) string { return "cluster/" + id }

// Options configure a Controller.
type Options struct {
	// Client reads the remote secrets in the control plane's cluster.
	Client kubernetes.Interface
	// Namespace holds the remote secrets (the control plane's namespace).
	Namespace string
	// LocalClusterID is the local cluster's ID (--clusterID): a secret key
	// naming it is ignored, as istiod does.
	LocalClusterID string
	// Domain is the cluster DNS suffix ("cluster.local").
	Domain string
	// Endpoints receives the remote services' endpoints.
	Endpoints *model.EndpointIndex
	// OnChange is told what the remote clusters changed (see
	// kube.ControllerOptions.OnChange); a cluster that leaves is one call.
	OnChange func(model.RegistryChanges)
	// SyncTimeout bounds how long WaitReady waits for remote clusters
	// (PILOT_REMOTE_CLUSTER_TIMEOUT); 0 means DefaultSyncTimeout.
	SyncTimeout time.Duration
	// Networks, when set, returns the network resolver of the remote
	// cluster clusterID (kube.NewNetworks with that cluster's ID, so
	// meshNetworks fromRegistry and its system namespace's label apply);
	// nil resolves from the workload label alone.
	Networks func(clusterID string) *kube.Networks
	// Metrics, when set, receive the managed clusters and their sync state.
	Metrics *Metrics
	// Log receives the controller's messages. Kubeconfigs and their
	// credentials never reach it.
	Log *slog.Logger
}

// Controller follows the remote secrets and runs one kube registry per
// remote cluster. It is a model.ServiceDiscovery over the remote clusters
// (in cluster ID order, the first defining a hostname wins), safe for
// concurrent use.
type Controller struct {
	opts    Options
	factory informers.SharedInformerFactory
	secrets corelisters.SecretLister
	synced  cache.InformerSynced

	// mu guards clusters and dirty; the worker goroutine is the only
	// writer of clusters.
	mu       sync.Mutex
	clusters map[string]*cluster // by cluster ID
	dirty    map[string]struct{} // secret names
	wake     chan struct{}
	// takeovers receives the rotated controllers whose caches synced.
	takeovers chan *run
	// view is what Services reads: the serving registries, by cluster ID.
	view    atomic.Pointer[[]*kube.Controller]
	initial *ready.Signal
	// runs counts the runs' goroutines, superseded ones included.
	runs sync.WaitGroup
	// selectors are the mesh's discoverySelectors and every run's filter.
	selectors selectors
}

var (
	_ model.ServiceDiscovery = (*Controller)(nil)
	_ model.ServiceLookup    = (*Controller)(nil)
)

// NewController builds the secret informer; nothing runs until Run.
func NewController(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Endpoints == nil || opts.Namespace == "" {
		return nil, errors.New("multicluster: Client, Endpoints and Namespace are required")
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.OnChange == nil {
		opts.OnChange = func(model.RegistryChanges) {}
	}
	f := informers.NewSharedInformerFactoryWithOptions(opts.Client, 0,
		informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = SecretLabel + "=true" }))
	inf := f.Core().V1().Secrets()
	c := &Controller{
		opts:      opts,
		factory:   f,
		secrets:   inf.Lister(),
		synced:    inf.Informer().HasSynced,
		clusters:  map[string]*cluster{},
		dirty:     map[string]struct{}{},
		wake:      make(chan struct{}, 1),
		takeovers: make(chan *run),
		initial:   ready.New("remote secrets"),
	}
	mark := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if s, ok := obj.(*corev1.Secret); ok {
			c.markSecret(s.Name)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: mark, UpdateFunc: func(_, cur any) { mark(cur) }, DeleteFunc: mark,
	}); err != nil {
		return nil, fmt.Errorf("multicluster: add event handler: %w", err)
	}
	return c, nil
}

func (c *Controller) markSecret(name string) {
	c.mu.Lock()
	c.dirty[name] = struct{}{}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run follows the remote secrets until ctx is done, then stops every remote
// cluster's controller and returns.
func (c *Controller) Run(ctx context.Context) error {
	if _, err := c.opts.Client.CoreV1().Secrets(c.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: SecretLabel + "=true", Limit: 1}); apierrors.IsForbidden(err) {
		// The chart grants this with multiCluster.enabled; without it
		// there are no remote clusters, and readiness does not wait.
		c.opts.Log.Info("remote secrets not readable (RBAC): no remote clusters", "namespace", c.opts.Namespace)
		c.initial.Mark()
		<-ctx.Done()
		return nil
	}
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	defer c.stopAll()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return fmt.Errorf("multicluster: remote secrets not synced: %w", context.Cause(ctx))
	}
	// Every secret present at start, whether or not its event was
	// handled yet, is read before readiness.
	if all, err := c.secrets.Secrets(c.opts.Namespace).List(labels.Everything()); err == nil {
		for _, s := range all {
			c.markSecret(s.Name)
		}
	}
	c.process(ctx)
	c.initial.Mark()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
			c.process(ctx)
		case r := <-c.takeovers:
			c.takeOver(r)
		}
	}
}

// WaitReady blocks until the secrets present at start were read and each
// of their clusters synced, or SyncTimeout passed since the cluster was
// added (then the cluster is reported and left out of readiness, as with
// PILOT_REMOTE_CLUSTER_TIMEOUT), or ctx ends.
func (c *Controller) WaitReady(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, c.opts.SyncTimeout)
	err := c.initial.Wait(sctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		// The control plane may not list Secrets in its namespace (RBAC):
		// remote clusters come when it can.
		c.opts.Log.Warn("remote secrets not listed within PILOT_REMOTE_CLUSTER_TIMEOUT; ready without remote clusters",
			"namespace", c.opts.Namespace, "timeout", c.opts.SyncTimeout)
		return nil
	}
	c.mu.Lock()
	type pending struct {
		id       string
		ctrl     *kube.Controller
		deadline time.Time
	}
	var wait []pending
	for _, id := range sortedKeys(c.clusters) {
		cl := c.clusters[id]
		wait = append(wait, pending{id, cl.serving.ctrl, cl.deadline})
	}
	c.mu.Unlock()
	for _, p := range wait {
		wctx, cancel := context.WithDeadline(ctx, p.deadline)
		err := p.ctrl.WaitReady(wctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return err
		}
		if err != nil {
			c.opts.Log.Warn("remote cluster not synced within PILOT_REMOTE_CLUSTER_TIMEOUT; ready without it",
				"cluster", p.id, "timeout", c.opts.SyncTimeout)
		}
	}
	return nil
}

// Services returns the services of every remote cluster, sorted by
// hostname, one per hostname: the lowest cluster ID's, with the addresses
// of the other clusters defining it (model.MergeClusters).
func (c *Controller) Services() []*model.Service {
	view := c.view.Load()
	if view == nil || len(*view) == 0 {
		return nil
	}
	if len(*view) == 1 {
		return (*view)[0].Services()
	}
	seen := map[string]int{}
	var out []*model.Service
	var dups map[string][]*model.Service
	for _, ctrl := range *view {
		for _, s := range ctrl.Services() {
			if _, ok := seen[s.Hostname]; ok {
				if dups == nil {
					dups = map[string][]*model.Service{}
				}
				dups[s.Hostname] = append(dups[s.Hostname], s)
				continue
			}
			seen[s.Hostname] = len(out)
			out = append(out, s)
		}
	}
	for h, others := range dups {
		i := seen[h]
		out[i] = model.MergeClusters(out[i], others...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Hostname < out[j].Hostname })
	return out
}

// Service returns the service of hostname as Services does, or nil.
func (c *Controller) Service(hostname string) *model.Service {
	view := c.view.Load()
	if view == nil {
		return nil
	}
	var first *model.Service
	var others []*model.Service
	for _, ctrl := range *view {
		switch s := ctrl.Service(hostname); {
		case s == nil:
		case first == nil:
			first = s
		default:
			others = append(others, s)
		}
	}
	if first == nil || others == nil {
		return first
	}
	return model.MergeClusters(first, others...)
}

// ClusterInfo describes one remote cluster for debugging.
type ClusterInfo struct {
	ID string `json:"id"`
	// Secret is NAMESPACE/NAME of the remote secret ("" for the local cluster).
	Secret string `json:"secretName,omitempty"`
	Status string `json:"syncStatus"`
}

// Clusters lists the remote clusters, by ID.
func (c *Controller) Clusters() []ClusterInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ClusterInfo, 0, len(c.clusters))
	for _, id := range sortedKeys(c.clusters) {
		cl := c.clusters[id]
		out = append(out, ClusterInfo{ID: id, Secret: c.opts.Namespace + "/" + cl.secret, Status: c.status(cl)})
	}
	return out
}

func (c *Controller) status(cl *cluster) string {
	switch {
	case cl.serving.ctrl.HasSynced():
		return StatusSynced
	case time.Now().After(cl.deadline):
		return StatusTimeout
	}
	return StatusSyncing
}

// publish makes the serving controllers the view; c.mu must be held.
func (c *Controller) publish() {
	view := make([]*kube.Controller, 0, len(c.clusters))
	for _, id := range sortedKeys(c.clusters) {
		view = append(view, c.clusters[id].serving.ctrl)
	}
	c.view.Store(&view)
	c.opts.Metrics.setRemote(len(view))
}

// process reconciles the clusters of the secrets that changed.
func (c *Controller) process(ctx context.Context) {
	c.mu.Lock()
	dirty := sortedKeys(c.dirty)
	c.dirty = map[string]struct{}{}
	c.mu.Unlock()
	for _, name := range dirty {
		secret, err := c.secrets.Secrets(c.opts.Namespace).Get(name)
		if err != nil && !apierrors.IsNotFound(err) {
			c.opts.Log.Error("remote secret lookup failed", "secret", c.opts.Namespace+"/"+name, "error", err)
			continue
		}
		c.reconcile(ctx, name, secret)
	}
}

// reconcile makes the clusters of secret name match its data (secret nil:
// deleted): clusters it no longer names leave, new ones start, changed
// kubeconfigs rotate.
func (c *Controller) reconcile(ctx context.Context, name string, secret *corev1.Secret) {
	var data map[string][]byte
	if secret != nil {
		data = secret.Data
	}
	c.mu.Lock()
	var gone []*cluster
	for _, id := range sortedKeys(c.clusters) {
		if cl := c.clusters[id]; cl.secret == name {
			if _, ok := data[id]; !ok {
				gone = append(gone, cl)
			}
		}
	}
	c.mu.Unlock()
	for _, cl := range gone {
		c.remove(cl)
	}
	for _, id := range sortedKeys(data) {
		c.apply(ctx, name, id, data[id])
	}
}

// apply adds cluster id of secret name or rotates its kubeconfig.
func (c *Controller) apply(ctx context.Context, name, id string, kubeconfig []byte) {
	log := c.opts.Log.With("secret", c.opts.Namespace+"/"+name, "key", id, "cluster", id)
	if id == c.opts.LocalClusterID {
		log.Info("remote secret names the local cluster; ignored")
		return
	}
	hash := sha256.Sum256(kubeconfig)
	c.mu.Lock()
	cl := c.clusters[id]
	c.mu.Unlock()
	if cl != nil && cl.secret != name {
		log.Warn("cluster already defined by another remote secret; ignored", "definedBy", c.opts.Namespace+"/"+cl.secret)
		return
	}
	if cl != nil && cl.hash == hash {
		return
	}
	r, err := c.newRun(ctx, id, kubeconfig)
	if err != nil {
		log.Error("remote cluster kubeconfig rejected", "error", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl == nil {
		cl = &cluster{id: id, secret: name, hash: hash, serving: r, deadline: time.Now().Add(c.opts.SyncTimeout)}
		c.clusters[id] = cl
		c.publish()
		c.opts.Metrics.setStatus(id, StatusSyncing)
		c.goWatchSync(cl, r, cl.deadline)
		log.Info("remote cluster added")
	} else {
		if cl.pending != nil {
			cl.pending.cancel() // superseded: its takeover is refused
		}
		cl.hash, cl.pending = hash, r
		log.Info("remote cluster kubeconfig changed; the new one takes over once synced")
	}
	r.start(c.opts.Log, &c.runs, &c.selectors)
}
