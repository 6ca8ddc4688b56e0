// Package autoregistration registers VMs as they connect, as istiod's
// WorkloadEntry controller does: a proxy whose node metadata names a
// WorkloadGroup (ISTIO_META_AUTO_REGISTER_GROUP) gets a WorkloadEntry made
// from the group's template, kept while it stays connected (to this or
// another replica) and deleted a grace period after it disconnects; the
// health it reports over xDS sets the entry's Healthy condition. A proxy
// that names an existing, health-checked WorkloadEntry instead
// (ISTIO_META_WORKLOAD_ENTRY) is followed the same way, except that its
// entry is never created or deleted: a grace period after it disconnects,
// only the Healthy condition goes. Every write goes through the Kubernetes API.
package autoregistration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
)

// Defaults of Options, as istiod's.
const (
	// DefaultGracePeriod is PILOT_WORKLOAD_ENTRY_GRACE_PERIOD.
	DefaultGracePeriod = 10 * time.Second
	// maxAttempts is how often a failed write is tried (istiod: 5).
	maxAttempts = 5
	// apiTimeout bounds each Kubernetes API call.
	apiTimeout = 10 * time.Second
	// maxMessage bounds the stored message of a health report.
	maxMessage = 1024
	// cleanupQPS is istiod's rate of cleanup deletes.
	cleanupQPS = 20
	// healthInterval is the least time between two health writes of one
	// entry: a proxy flapping, or flooding reports, costs at most one
	// write a second (the latest report wins).
	healthInterval = time.Second
)

// Options configure a Controller.
type Options struct {
	// Client writes WorkloadEntries and reads WorkloadGroups.
	Client istioclient.Interface
	// InstanceID names this replica in istio.io/workloadController (the pod name).
	InstanceID string
	// GracePeriod is PILOT_WORKLOAD_ENTRY_GRACE_PERIOD: how long a
	// disconnected proxy's entry is kept for it to reconnect; zero takes
	// DefaultGracePeriod. Entries are also swept one grace period after Run
	// starts, then every 10 grace periods.
	GracePeriod time.Duration
	// MaxConnectionAge is the xDS servers' max connection age: an entry
	// still marked connected 2.25 times that long after connecting lost its
	// controller and is deleted (istiod's rule); zero or huge: never.
	MaxConnectionAge time.Duration
	// Entries, when set, is where the periodic sweep finds WorkloadEntries
	// (the informers' store: no API call); nil lists them from Client.
	Entries model.ConfigStore
	// DisableAutoRegistration turns off registration from WorkloadGroups
	// (PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION=false): such proxies
	// connect unregistered, with a log line.
	DisableAutoRegistration bool
	// DisableHealthChecks turns off the health of entries named in
	// WORKLOAD_ENTRY (PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS=false).
	DisableHealthChecks bool
	// Registerer takes the auto_registration_* counters; nil: not exported.
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// Controller follows the proxies that register as WorkloadEntries. It is
// the xds.WorkloadHooks of the discovery server.
type Controller struct {
	opts    Options
	policy  cleanupPolicy
	metrics *metrics
	queue   *workQueue
	cleanup *rate.Limiter

	// conns counts this replica's connections per registered entry: a
	// proxy reconnecting before its old stream ended must not unregister.
	mu    sync.Mutex
	conns map[entryKey]int

	// healthWritten is when each entry's health was last written (only
	// the worker goroutine uses it).
	healthWritten map[entryKey]time.Time
}

// New returns a controller; writes happen once Run runs (registration
// itself happens in OnConnect, on the stream's goroutine).
func New(opts Options) (*Controller, error) {
	if opts.Client == nil {
		return nil, errors.New("auto-registration: Client is required")
	}
	if opts.GracePeriod <= 0 {
		opts.GracePeriod = DefaultGracePeriod
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	policy := cleanupPolicy{grace: opts.GracePeriod}
	if a := opts.MaxConnectionAge; a > 0 && a < time.Duration(math.MaxInt64/3) {
		policy.staleConnected = a * 9 / 4
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Controller{
		opts: opts, policy: policy, metrics: m, queue: newWorkQueue(),
		cleanup: rate.NewLimiter(cleanupQPS, 1), conns: map[entryKey]int{}, healthWritten: map[entryKey]time.Time{},
	}, nil
}

// Run handles disconnects, health reports and cleanups until ctx is done,
// sweeping every entry for ones whose proxy is gone one grace period after
// it starts (what a restarted replica's previous life left behind: the
// config sources have synced by then), then every 10 grace periods.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.stop()
	sweep := time.NewTimer(c.opts.GracePeriod)
	defer sweep.Stop()
	c.opts.Log.Info("WorkloadEntry auto-registration on", "instance", c.opts.InstanceID, "grace_period", c.opts.GracePeriod)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sweep.C:
			c.sweep(ctx)
			sweep.Reset(10 * c.opts.GracePeriod)
		case <-c.queue.kick:
			for {
				k, w, ok := c.queue.pop()
				if !ok {
					break
				}
				c.process(ctx, k, w)
			}
		}
	}
}

// key returns the key of the entry proxy stands for: auto says it is
// registered from a WorkloadGroup, else it is the one WORKLOAD_ENTRY names;
// ok is false for proxies this controller does not follow.
func (c *Controller) key(p *model.Proxy) (k entryKey, auto, ok bool) {
	switch {
	case p.Metadata.AutoRegisterGroup != "":
		if c.opts.DisableAutoRegistration || len(p.IPAddresses) == 0 {
			return entryKey{}, false, false
		}
		return entryKey{p.ConfigNamespace(), EntryName(p.Metadata.AutoRegisterGroup, p.IPAddresses[0], p.Metadata.Network)}, true, true
	case p.Metadata.WorkloadEntry != "" && !c.opts.DisableHealthChecks:
		return entryKey{p.ConfigNamespace(), p.Metadata.WorkloadEntry}, false, true
	}
	return entryKey{}, false, false
}

// OnConnect registers proxy when it names a WorkloadGroup: creates its
// WorkloadEntry from the group, or marks the existing one connected to this
// replica. It refuses (PermissionDenied) a proxy without an authenticated
// identity of the group's namespace and the template's service account.
//
// A proxy naming a WorkloadEntry (WORKLOAD_ENTRY) must name an existing one
// (else FailedPrecondition) and pass the same identity checks when the
// entry has health checks enabled; the entry is then marked connected to
// this replica. Without health checks it connects untracked, as istiod.
func (c *Controller) OnConnect(ctx context.Context, proxy *model.Proxy, connectedAt time.Time) error {
	group := proxy.Metadata.AutoRegisterGroup
	k, auto, follow := c.key(proxy)
	if !follow && group != "" && c.opts.DisableAutoRegistration {
		c.opts.Log.Warn("proxy asks for auto-registration, which is off; it connects without a WorkloadEntry",
			"reason", "PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION=false", clientlog.String("node", proxy.ID), clientlog.String("group", group))
		return nil
	}
	if group == "" && !follow {
		return nil
	}
	ns := proxy.ConfigNamespace()
	what, subject := "auto-registration", "WorkloadGroup "+ns+"/"+group
	if !auto {
		what, subject = "WorkloadEntry health checks", "WorkloadEntry "+k.String()
	}
	log := c.opts.Log.With(clientlog.String("node", proxy.ID), clientlog.String("subject", subject))
	refuse := func(code codes.Code, err error) error {
		c.metrics.errors.Inc()
		log.Warn(what+" refused", clientlog.Error("error", err))
		return status.Errorf(code, "%s of %s in %s: %v", what, proxy.ID, subject, err)
	}
	if group != "" && !follow {
		return refuse(codes.InvalidArgument, errors.New("the node has no IP address"))
	}
	if proxy.Metadata.Namespace != "" && proxy.Metadata.Namespace != ns {
		return refuse(codes.PermissionDenied, fmt.Errorf("%w: node metadata NAMESPACE %q is not the node ID's namespace %q", errIdentity, proxy.Metadata.Namespace, ns))
	}
	// Refuse whom no entry of the namespace would admit before any API
	// call: an unauthenticated stream costs the API server nothing.
	if err := canControl(proxy, &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Namespace: ns}}); err != nil {
		return refuse(codes.PermissionDenied, err)
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	created, err := c.register(ctx, k, auto, proxy, connectedAt)
	switch {
	case errors.Is(err, errNotHealthChecked):
		log.Info("proxy names a WorkloadEntry without health checks; its health is not followed", "entry", k.String())
		return nil
	case errors.Is(err, errIdentity):
		return refuse(codes.PermissionDenied, err)
	case apierrors.IsNotFound(err):
		return refuse(codes.FailedPrecondition, err)
	case err != nil:
		return refuse(codes.Unavailable, err)
	}
	c.mu.Lock()
	c.conns[k]++
	c.mu.Unlock()
	switch {
	case !auto:
		log.Info("health-checked WorkloadEntry connected", "entry", k.String())
	case created:
		c.metrics.success.Inc()
		log.Info("auto-registered WorkloadEntry", "entry", k.String())
	default:
		c.metrics.updates.Inc()
		log.Info("auto-registered WorkloadEntry reconnected", "entry", k.String())
	}
	return nil
}

// errNotHealthChecked: the WorkloadEntry a proxy names has no health
// checks, so nothing of it is followed.
var errNotHealthChecked = errors.New("WorkloadEntry without health checks")

// register creates k for proxy (auto only) or marks it connected; created
// says which. It retries when another writer (a cleanup, another replica)
// got between its read and its write.
func (c *Controller) register(ctx context.Context, k entryKey, auto bool, proxy *model.Proxy, at time.Time) (created bool, err error) {
	entries := c.opts.Client.NetworkingV1().WorkloadEntries(k.namespace)
	for range 3 {
		cur, err := entries.Get(ctx, k.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && !auto {
			return false, fmt.Errorf("WorkloadEntry %s, named by the node's WORKLOAD_ENTRY: %w", k, err)
		}
		if apierrors.IsNotFound(err) {
			group, err := c.opts.Client.NetworkingV1().WorkloadGroups(k.namespace).Get(ctx, proxy.Metadata.AutoRegisterGroup, metav1.GetOptions{})
			if err != nil {
				return false, fmt.Errorf("WorkloadGroup %s/%s: %w", k.namespace, proxy.Metadata.AutoRegisterGroup, err)
			}
			entry := entryFromGroup(k.name, proxy, group)
			if err := canControl(proxy, entry); err != nil {
				return false, err
			}
			setConnected(entry, c.opts.InstanceID, at)
			_, err = entries.Create(ctx, entry, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("create WorkloadEntry %s: %w", k, err)
			}
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("read WorkloadEntry %s: %w", k, err)
		}
		if !auto && cur.Annotations[serviceentry.HealthCheckAnnotation] != "true" {
			return false, errNotHealthChecked
		}
		if err := canControl(proxy, cur); err != nil {
			return false, err
		}
		if last, ok := annotationTime(cur.Annotations, AnnotationConnectedAt); ok && at.Before(last) {
			return false, nil // a newer connection (elsewhere) already wrote it
		}
		next := cur.DeepCopy()
		setConnected(next, c.opts.InstanceID, at)
		_, err = entries.Update(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("update WorkloadEntry %s: %w", k, err)
		}
		return false, nil
	}
	return false, fmt.Errorf("WorkloadEntry %s: changed by another writer at every attempt", k)
}

// OnDisconnect queues the unregistration of proxy's entry once its last
// connection to this replica ended.
func (c *Controller) OnDisconnect(proxy *model.Proxy, connectedAt time.Time) {
	k, _, ok := c.key(proxy)
	if !ok {
		return
	}
	c.mu.Lock()
	n := c.conns[k]
	if n > 1 {
		c.conns[k] = n - 1
	} else {
		delete(c.conns, k)
	}
	c.mu.Unlock()
	if n != 1 {
		return
	}
	c.queue.add(k, work{disconnect: &disconnectEvent{connectedAt: connectedAt, at: time.Now()}})
}

// OnHealth queues a health report of a registered proxy; reports of
// others are ignored.
func (c *Controller) OnHealth(proxy *model.Proxy, healthy bool, message string) {
	k, _, ok := c.key(proxy)
	if !ok {
		return
	}
	c.mu.Lock()
	registered := c.conns[k] > 0
	c.mu.Unlock()
	if !registered {
		return
	}
	if healthy {
		message = ""
	}
	c.queue.add(k, work{health: &healthEvent{healthy: healthy, message: clientlog.Truncate(message, maxMessage), at: time.Now()}})
}

// process does k's pending work; what fails is tried again later, with backoff.
func (c *Controller) process(ctx context.Context, k entryKey, w work) {
	var retry work
	if w.disconnect != nil {
		if err := c.unregister(ctx, k, *w.disconnect); err != nil {
			c.failed(k, "unregister", err)
			retry.disconnect = w.disconnect
		}
	}
	if w.health != nil {
		if wait := healthInterval - time.Since(c.healthWritten[k]); wait > 0 {
			c.queue.after(wait, k, work{health: w.health})
		} else if err := c.updateHealth(ctx, k, *w.health); err != nil {
			c.failed(k, "health update", err)
			retry.health = w.health
		} else {
			c.healthWritten[k] = time.Now()
		}
	}
	if w.cleanup {
		c.deleteIfGone(ctx, k)
	}
	if w.disconnect != nil || w.cleanup {
		delete(c.healthWritten, k)
	}
	if retry.disconnect == nil && retry.health == nil {
		return
	}
	if retry.attempts = w.attempts + 1; retry.attempts >= maxAttempts {
		c.opts.Log.Error("auto-registration gave up on a WorkloadEntry", "entry", k.String(), "attempts", retry.attempts)
		return
	}
	c.queue.after(100*time.Millisecond<<retry.attempts, k, retry)
}

func (c *Controller) failed(k entryKey, what string, err error) {
	c.metrics.errors.Inc()
	c.opts.Log.Warn("auto-registration: "+what+" failed", "entry", k.String(), "error", err)
}

// unregister marks k disconnected, unless its proxy reconnected since or
// another replica controls it, and schedules its cleanup after the grace period.
func (c *Controller) unregister(ctx context.Context, k entryKey, d disconnectEvent) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	entries := c.opts.Client.NetworkingV1().WorkloadEntries(k.namespace)
	cur, err := c.controlled(ctx, k)
	if cur == nil {
		return err // gone, or reconnected to another replica
	}
	if last, ok := annotationTime(cur.Annotations, AnnotationConnectedAt); ok && last.After(d.connectedAt) {
		return nil // reconnected here
	}
	next := cur.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	delete(next.Annotations, AnnotationConnectedAt)
	next.Annotations[AnnotationDisconnectedAt] = d.at.Format(timeFormat)
	if _, err := entries.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if cur.Annotations[AnnotationGroup] != "" {
		c.metrics.unregistrations.Inc()
		c.opts.Log.Info("auto-registered WorkloadEntry disconnected", "entry", k.String(), "delete_after", c.opts.GracePeriod)
	} else {
		c.opts.Log.Info("health-checked WorkloadEntry disconnected", "entry", k.String(), "health_cleared_after", c.opts.GracePeriod)
	}
	c.queue.after(c.opts.GracePeriod, k, work{cleanup: true})
	return nil
}

// controlled reads k and returns it while this replica controls it; nil
// (and no error) when it is gone or another replica controls it.
func (c *Controller) controlled(ctx context.Context, k entryKey) (*networkingv1.WorkloadEntry, error) {
	cur, err := c.opts.Client.NetworkingV1().WorkloadEntries(k.namespace).Get(ctx, k.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case cur.Annotations[AnnotationController] != c.opts.InstanceID:
		return nil, nil
	}
	return cur, nil
}

// deleteIfGone deletes k if the cleanup policy says its proxy is gone, or,
// for an entry that was not auto-registered, clears its Healthy condition;
// the delete is conditional on the version read, so a reconnect wins.
func (c *Controller) deleteIfGone(ctx context.Context, k entryKey) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	entries := c.opts.Client.NetworkingV1().WorkloadEntries(k.namespace)
	cur, err := entries.Get(ctx, k.name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			c.failed(k, "cleanup", err)
		}
		return
	}
	if c.policy.shouldClearHealth(cur.Annotations, time.Now()) {
		c.clearHealth(ctx, k, cur)
		return
	}
	if !c.policy.shouldDelete(cur.Annotations, time.Now()) {
		return
	}
	if err := c.cleanup.Wait(ctx); err != nil {
		return
	}
	rv := cur.ResourceVersion
	err = entries.Delete(ctx, k.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	switch {
	case err == nil:
		c.metrics.deletes.Inc()
		c.opts.Log.Info("auto-registered WorkloadEntry deleted: its proxy did not reconnect", "entry", k.String())
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
	default:
		c.failed(k, "cleanup", err)
	}
}

// sweep queues the cleanup of every entry the policy says is gone: those
// whose controller died before deleting them.
func (c *Controller) sweep(ctx context.Context) {
	now := time.Now()
	if c.opts.Entries != nil {
		for _, e := range c.opts.Entries.List(model.KindWorkloadEntry) {
			st, _ := e.Status.(*metav1alpha1.IstioStatus)
			if c.policy.shouldDelete(e.Annotations, now) || hasHealth(st.GetConditions()) && c.policy.shouldClearHealth(e.Annotations, now) {
				c.queue.add(entryKey{e.Namespace, e.Name}, work{cleanup: true})
			}
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	list, err := c.opts.Client.NetworkingV1().WorkloadEntries(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.metrics.errors.Inc()
		c.opts.Log.Warn("auto-registration: listing WorkloadEntries for cleanup failed", "error", err)
		return
	}
	for _, e := range list.Items {
		if c.policy.shouldDelete(e.Annotations, now) || hasHealth(e.Status.GetConditions()) && c.policy.shouldClearHealth(e.Annotations, now) {
			c.queue.add(entryKey{e.Namespace, e.Name}, work{cleanup: true})
		}
	}
}
