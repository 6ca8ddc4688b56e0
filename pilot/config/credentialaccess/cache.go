// Package credentialaccess decides, off the push path, whether a gateway's
// verified identity may read the credentials (Secrets) of a namespace other
// than its own: a cache of decisions (model.CredentialAccess) fed by
// reviews (SubjectAccessReviews) that its own workers make in the
// background. Asking never blocks; a new or changed decision asks for a
// push of the namespace's credentials.
//
// Decisions live AuthzCacheTTL, as in Istio. An expired decision is still
// served while a background review refreshes it (stale-while-revalidate),
// however long nobody asked: a gateway that got no push for a while must not
// see its credential withdrawn (a Delta removal) at the next one while the
// decision is reviewed again. Only the bounds below evict a decision. A
// failed review is not a decision: the previous
// one, if any, stays, and the review is retried with exponential backoff
// (RetryMin to RetryMax) as long as the key was asked for within the TTL.
//
// Bounds (a gateway may name any namespace): at most MaxKeysPerIdentity
// keys per service account and MaxKeys in all, the least recently asked
// dropped first; Workers reviews at a time, each bounded by ReviewTimeout;
// a key is queued at most once (duplicates coalesce), so the queue holds at
// most MaxKeys keys.
package credentialaccess

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
)

// Defaults of Options.
const (
	// AuthzCacheTTL is how long a decision is fresh, as Istio's credentials
	// controller keeps one.
	AuthzCacheTTL        = time.Minute
	DefaultReviewTimeout = 10 * time.Second
	DefaultWorkers       = 4
	DefaultMaxKeys       = 4096
	// DefaultMaxKeysPerIdentity is the most namespaces one service account
	// holds decisions for; a gateway reading more thrashes its own keys.
	DefaultMaxKeysPerIdentity = 256
	DefaultRetryMin           = time.Second
	DefaultRetryMax           = AuthzCacheTTL
)

// Key is a service account asking for the credentials of a namespace.
type Key struct{ SANamespace, ServiceAccount, Namespace string }

// Options configure a Cache; zero values take the defaults.
type Options struct {
	Reviewer Reviewer
	// OnDecision, when set, is called (outside any lock, from a worker)
	// with the namespace of a decision that is new or changed, so that the
	// gateways reading that namespace's credentials are pushed.
	OnDecision         func(namespace string)
	TTL                time.Duration
	ReviewTimeout      time.Duration
	Workers            int
	MaxKeys            int
	MaxKeysPerIdentity int
	RetryMin, RetryMax time.Duration
	// Now is the clock of decision lifetimes (time.Now when nil).
	Now func() time.Time
	Log *slog.Logger
}

// Cache is a model.CredentialAccess: decisions cached per Key, made by
// Reviewer on the workers of Run.
type Cache struct {
	opts Options

	mu          sync.Mutex
	entries     map[Key]*entry
	perIdentity map[identity]int
	// lru holds the entries, most recently asked first; queue those
	// waiting for a worker, oldest first.
	lru, queue *list.List
	// stopped is set when Run ends: nothing is queued or retried after.
	stopped bool
	// wake (capacity 1) tells an idle worker the queue is not empty.
	wake chan struct{}
	// timers counts the retry timers not yet fired or stopped.
	timers sync.WaitGroup
}

type identity struct{ namespace, serviceAccount string }

type entry struct {
	key Key
	// decided, allowed, reason: the decision, made at decidedAt.
	decided, allowed bool
	reason           string
	decidedAt        time.Time
	lastAsked        time.Time
	// queued: in queue; inFlight: a worker reviews it; retry: a failed
	// review waits for its backoff.
	queued, inFlight bool
	retry            *time.Timer
	failures         int
	lastErr          string
	lruElem          *list.Element
	queueElem        *list.Element
}

var _ model.CredentialAccess = (*Cache)(nil)

// New returns a Cache; decisions are made once Run runs.
func New(opts Options) *Cache {
	if opts.TTL <= 0 {
		opts.TTL = AuthzCacheTTL
	}
	if opts.ReviewTimeout <= 0 {
		opts.ReviewTimeout = DefaultReviewTimeout
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.MaxKeysPerIdentity <= 0 {
		opts.MaxKeysPerIdentity = DefaultMaxKeysPerIdentity
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(DefaultRetryMax, opts.RetryMin)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.OnDecision == nil {
		opts.OnDecision = func(string) {}
	}
	return &Cache{
		opts: opts, entries: map[Key]*entry{}, perIdentity: map[identity]int{},
		lru: list.New(), queue: list.New(), wake: make(chan struct{}, 1),
	}
}

// Decide returns the decision for id reading the credentials of namespace,
// without blocking: pending while the first review runs (it is queued if
// needed), a stale decision while a refresh runs.
func (c *Cache) Decide(id model.VerifiedIdentity, namespace string) model.AccessDecision {
	if id.Namespace == "" || id.ServiceAccount == "" {
		return model.AccessDecision{State: model.AccessDenied,
			Reason: fmt.Sprintf("identity %q has no namespace or service account", clientlog.Truncate(id.SPIFFE, clientlog.MaxValue))}
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		// Nothing to review: no namespace has that name.
		return model.AccessDecision{State: model.AccessDenied,
			Reason: fmt.Sprintf("%q is not a namespace name: %s", clientlog.Truncate(namespace, clientlog.MaxValue), errs[0])}
	}
	k := Key{SANamespace: id.Namespace, ServiceAccount: id.ServiceAccount, Namespace: namespace}
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[k]
	if e == nil {
		e = c.add(k)
	}
	c.lru.MoveToFront(e.lruElem)
	e.lastAsked = now
	if !e.decided {
		c.schedule(e)
		reason := "review pending"
		if e.lastErr != "" {
			reason = fmt.Sprintf("review pending, the last one failed (%d times): %s", e.failures, e.lastErr)
		}
		return model.AccessDecision{State: model.AccessPending, Reason: reason}
	}
	if c.expired(e, now) {
		c.schedule(e)
	}
	return c.decision(e)
}

// Run reviews queued keys on Options.Workers goroutines until ctx is done;
// each review's timeout derives from ctx. Every TTL it forgets the keys
// nobody asked for (see sweep). It returns once everything it started stopped.
func (c *Cache) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() {
			for {
				e, k := c.next(ctx)
				if e == nil {
					return
				}
				c.review(ctx, e, k)
			}
		})
	}
	tick := time.NewTicker(c.opts.TTL)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			c.sweep()
		}
	}
	tick.Stop()
	c.mu.Lock()
	c.stopped = true
	for _, e := range c.entries {
		c.stopRetry(e)
	}
	c.mu.Unlock()
	wg.Wait()
	c.timers.Wait()
}

// next takes the oldest queued entry, waiting for one; nil when ctx ends.
func (c *Cache) next(ctx context.Context) (*entry, Key) {
	for {
		c.mu.Lock()
		if front := c.queue.Front(); front != nil && !c.stopped {
			e := c.queue.Remove(front).(*entry)
			e.queued, e.queueElem, e.inFlight = false, nil, true
			more := c.queue.Len() > 0
			c.mu.Unlock()
			if more {
				c.signal()
			}
			return e, e.key
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, Key{}
		case <-c.wake:
		}
	}
}

// review runs one review of e and records its outcome.
func (c *Cache) review(ctx context.Context, e *entry, k Key) {
	rctx, cancel := context.WithTimeout(ctx, c.opts.ReviewTimeout)
	allowed, reason, err := c.opts.Reviewer.Review(rctx, k)
	cancel()
	now := c.opts.Now()
	c.mu.Lock()
	e.inFlight = false
	if c.entries[k] != e || c.stopped {
		c.mu.Unlock() // dropped meanwhile, or shutting down
		return
	}
	if err != nil {
		e.failures++
		e.lastErr = err.Error()
		failures, stale := e.failures, e.decided
		wanted := now.Sub(e.lastAsked) < c.opts.TTL
		var delay time.Duration
		switch {
		case wanted:
			delay = c.backoff(failures)
			c.retryAfter(e, delay)
		case !e.decided:
			c.remove(e)
		}
		c.mu.Unlock()
		c.opts.Log.Warn("credential access review failed", "serviceAccount", k.SANamespace+"/"+k.ServiceAccount,
			"namespace", k.Namespace, "failures", failures, "keptDecision", stale, "retryIn", delay, "error", err)
		return
	}
	isNew, changed := !e.decided, e.decided && e.allowed != allowed
	e.decided, e.allowed, e.reason, e.decidedAt = true, allowed, reason, now
	e.failures, e.lastErr = 0, ""
	c.mu.Unlock()
	attrs := []any{"serviceAccount", k.SANamespace + "/" + k.ServiceAccount, "namespace", k.Namespace, "allowed", allowed}
	switch {
	case changed:
		c.opts.Log.Info("credential access decision changed", attrs...)
	case isNew:
		c.opts.Log.Debug("credential access decided", attrs...)
	}
	if isNew || changed {
		c.opts.OnDecision(k.Namespace)
	}
}

// sweep forgets the undecided keys not asked for within the TTL (a review
// that keeps failing for a gateway that went away), to give their memory
// back; decisions stay until the bounds evict them.
func (c *Cache) sweep() {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.inFlight {
			continue
		}
		if !e.decided && now.Sub(e.lastAsked) >= c.opts.TTL {
			c.remove(e)
		}
	}
}

// backoff is the delay before retry number failures.
func (c *Cache) backoff(failures int) time.Duration {
	d := c.opts.RetryMin
	for i := 1; i < failures && d < c.opts.RetryMax; i++ {
		d *= 2
	}
	return min(d, c.opts.RetryMax)
}

// retryAfter queues e again after delay if it is still wanted then; c.mu held.
func (c *Cache) retryAfter(e *entry, delay time.Duration) {
	c.timers.Add(1)
	e.retry = time.AfterFunc(delay, func() {
		defer c.timers.Done()
		c.mu.Lock()
		defer c.mu.Unlock()
		if e.retry == nil || c.entries[e.key] != e || c.stopped {
			return
		}
		e.retry = nil
		if c.opts.Now().Sub(e.lastAsked) < c.opts.TTL {
			c.schedule(e)
		} else if !e.decided {
			c.remove(e)
		}
	})
}

// stopRetry cancels e's pending retry, if any; c.mu held.
func (c *Cache) stopRetry(e *entry) {
	if e.retry != nil && e.retry.Stop() {
		c.timers.Done()
	}
	e.retry = nil
}

// schedule queues e for review unless it is queued, under review or
// waiting to retry; c.mu held.
func (c *Cache) schedule(e *entry) {
	if e.queued || e.inFlight || e.retry != nil || c.stopped {
		return
	}
	e.queued = true
	e.queueElem = c.queue.PushBack(e)
	c.signal()
}

func (c *Cache) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// add makes room within the bounds and inserts a new entry for k; c.mu held.
func (c *Cache) add(k Key) *entry {
	id := identity{k.SANamespace, k.ServiceAccount}
	if c.perIdentity[id] >= c.opts.MaxKeysPerIdentity {
		for el := c.lru.Back(); el != nil; el = el.Prev() {
			if old := el.Value.(*entry); old.key.SANamespace == id.namespace && old.key.ServiceAccount == id.serviceAccount {
				c.remove(old)
				break
			}
		}
	}
	for len(c.entries) >= c.opts.MaxKeys {
		c.remove(c.lru.Back().Value.(*entry))
	}
	e := &entry{key: k}
	e.lruElem = c.lru.PushFront(e)
	c.entries[k] = e
	c.perIdentity[id]++
	return e
}

// remove forgets e (a review under way is then discarded); c.mu held.
func (c *Cache) remove(e *entry) {
	if c.entries[e.key] != e {
		return
	}
	delete(c.entries, e.key)
	id := identity{e.key.SANamespace, e.key.ServiceAccount}
	if c.perIdentity[id]--; c.perIdentity[id] <= 0 {
		delete(c.perIdentity, id)
	}
	c.lru.Remove(e.lruElem)
	if e.queueElem != nil {
		c.queue.Remove(e.queueElem)
		e.queued, e.queueElem = false, nil
	}
	c.stopRetry(e)
}

func (c *Cache) expired(e *entry, now time.Time) bool {
	return !now.Before(e.decidedAt.Add(c.opts.TTL))
}

func (c *Cache) decision(e *entry) model.AccessDecision {
	if e.allowed {
		return model.AccessDecision{State: model.AccessAllowed}
	}
	reason := fmt.Sprintf("service account %s/%s may not list secrets in namespace %q", e.key.SANamespace, e.key.ServiceAccount, e.key.Namespace)
	if e.reason != "" {
		reason += " (" + e.reason + ")"
	}
	return model.AccessDecision{State: model.AccessDenied, Reason: reason}
}

// Len is the number of keys held (decided or not).
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
