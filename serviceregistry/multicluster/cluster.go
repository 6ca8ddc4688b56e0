package multicluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/serviceregistry/kube"
)

// cluster is one remote cluster: the controller serving it and, while a new
// kubeconfig syncs, the one about to take over.
type cluster struct {
	id     string
	secret string // name of the secret defining it
	hash   [sha256.Size]byte
	// serving is the controller in the view; pending the one started for
	// a rotated kubeconfig (nil when none).
	serving, pending *run
	// deadline is when the serving run counts as timed out if not synced
	// (PILOT_REMOTE_CLUSTER_TIMEOUT after it started serving).
	deadline time.Time
}

// run is one kube controller of a cluster and how to stop it.
type run struct {
	cluster string
	ctrl    *kube.Controller
	cancel  context.CancelFunc
	done    chan struct{}
	// verdict answers a pending run's takeover request: true takes over.
	verdict chan bool
	// filter applies the mesh's discoverySelectors to this cluster's
	// namespaces (each cluster labels its own).
	filter *kube.NamespaceFilter
	// ctx is the run's own context, which cancel ends.
	ctx context.Context //nolint:containedctx // a run is a goroutine's lifetime
}

// stop ends the run and waits until it stopped writing.
func (r *run) stop() {
	r.cancel()
	<-r.done
}

// newRun builds (without starting) a controller of cluster id; once its
// caches synced it asks the worker whether it may serve (requestTakeover).
func (c *Controller) newRun(ctx context.Context, id string, kubeconfig []byte) (*run, error) {
	rc, err := restConfigFor(kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	r := &run{cluster: id, done: make(chan struct{}), verdict: make(chan bool, 1)}
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.filter = c.selectors.newFilter()
	var networks *kube.Networks
	if c.opts.Networks != nil {
		networks = c.opts.Networks(id)
	}
	r.ctrl, err = kube.NewController(kube.ControllerOptions{
		Client: client, Domain: c.opts.Domain, Shard: ShardFor(id), ClusterID: id, Networks: networks, Filter: r.filter,
		Endpoints: c.opts.Endpoints, OnChange: c.opts.OnChange,
		OnSynced: func() error { return c.requestTakeover(r) },
		Log:      c.opts.Log.With("registry", "kube", "cluster", id),
	})
	if err != nil {
		c.selectors.forget(r.filter)
		r.cancel()
		return nil, err
	}
	return r, nil
}

// start runs r's controller until r is stopped; wg counts it, and sels
// forgets its filter then.
func (r *run) start(log *slog.Logger, wg *sync.WaitGroup, sels *selectors) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(r.done)
		defer sels.forget(r.filter)
		if err := r.ctrl.Run(r.ctx); err != nil && r.ctx.Err() == nil && !errors.Is(err, errNotServing) {
			log.Error("remote cluster registry stopped", "cluster", r.cluster, "error", err)
		}
	}()
}

// errNotServing ends a run that was superseded before it synced.
var errNotServing = errors.New("superseded before it synced")

// requestTakeover runs on r's goroutine once its caches synced: the worker
// decides (takeOver) whether r serves; an error ends r without writing.
func (c *Controller) requestTakeover(r *run) error {
	select {
	case c.takeovers <- r:
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	select {
	case ok := <-r.verdict:
		if !ok {
			return errNotServing
		}
		return nil
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
}

// takeOver answers a synced run: the serving run of its cluster proceeds;
// the pending one stops the serving one, inherits its services and
// replaces it in the view, so the cluster never leaves the model; any other
// (superseded, or of a removed cluster) is refused.
func (c *Controller) takeOver(r *run) {
	c.mu.Lock()
	cl := c.clusters[r.cluster]
	c.mu.Unlock()
	switch {
	case cl != nil && cl.serving == r:
		r.verdict <- true
		return
	case cl == nil || cl.pending != r:
		r.verdict <- false
		return
	}
	old := cl.serving
	old.stop()
	r.ctrl.Inherit(old.ctrl)
	c.mu.Lock()
	cl.serving, cl.pending = r, nil
	cl.deadline = time.Now().Add(c.opts.SyncTimeout)
	c.publish()
	c.mu.Unlock()
	r.verdict <- true
	c.goWatchSync(cl, r, cl.deadline)
	c.opts.Log.Info("remote cluster kubeconfig rotated", "cluster", r.cluster, "secret", c.opts.Namespace+"/"+cl.secret)
}

// remove stops cluster cl and takes its services and endpoints out in one
// change.
func (c *Controller) remove(cl *cluster) {
	if cl.pending != nil {
		cl.pending.stop()
	}
	cl.serving.stop()
	c.mu.Lock()
	delete(c.clusters, cl.id)
	c.publish()
	c.mu.Unlock()
	changes := cl.serving.ctrl.Clear()
	c.opts.Metrics.forget(cl.id)
	c.opts.Log.Info("remote cluster removed", "cluster", cl.id, "secret", c.opts.Namespace+"/"+cl.secret,
		"services", len(changes.Services)+len(changes.Endpoints))
	if !changes.Empty() {
		c.opts.OnChange(changes)
	}
}

// goWatchSync runs watchSync on its own goroutine, counted in c.runs.
func (c *Controller) goWatchSync(cl *cluster, r *run, deadline time.Time) {
	c.runs.Add(1)
	go func() {
		defer c.runs.Done()
		c.watchSync(cl, r, deadline)
	}()
}

// watchSync follows r's initial sync into the metrics: syncing, synced, or
// timeout once deadline passed.
func (c *Controller) watchSync(cl *cluster, r *run, deadline time.Time) {
	current := func(status string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.clusters[cl.id] == cl && cl.serving == r {
			c.opts.Metrics.setStatus(cl.id, status)
		}
	}
	dctx, cancel := context.WithDeadline(r.ctx, deadline)
	err := r.ctrl.WaitReady(dctx)
	cancel()
	if err != nil {
		if r.ctx.Err() != nil {
			return
		}
		c.opts.Metrics.timedOut()
		current(StatusTimeout)
		c.opts.Log.Warn("remote cluster not synced within PILOT_REMOTE_CLUSTER_TIMEOUT", "cluster", cl.id, "timeout", c.opts.SyncTimeout)
		if r.ctrl.WaitReady(r.ctx) != nil {
			return
		}
	}
	current(StatusSynced)
	c.opts.Log.Info("remote cluster synced", "cluster", cl.id, "services", len(r.ctrl.Services()), "elapsed", time.Since(deadline.Add(-c.opts.SyncTimeout)).Round(time.Millisecond))
}

// stopAll stops every cluster's controllers (the process is ending: the
// model is left as it is).
func (c *Controller) stopAll() {
	c.mu.Lock()
	var runs []*run
	for _, cl := range c.clusters {
		runs = append(runs, cl.serving)
		if cl.pending != nil {
			runs = append(runs, cl.pending)
		}
	}
	c.mu.Unlock()
	for _, r := range runs {
		r.cancel()
	}
	for _, r := range runs {
		<-r.done
	}
	c.runs.Wait() // superseded runs, cancelled when superseded
}
