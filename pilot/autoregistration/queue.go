package autoregistration

import (
	"sync"
	"time"
)

// entryKey names one WorkloadEntry.
type entryKey struct{ namespace, name string }

func (k entryKey) String() string { return k.namespace + "/" + k.name }

// disconnectEvent is a proxy's last connection ending.
type disconnectEvent struct {
	// connectedAt is when that connection began; at when it ended.
	connectedAt, at time.Time
}

// healthEvent is one health report.
type healthEvent struct {
	healthy bool
	message string
	at      time.Time
}

// work is what is pending for one entry: the latest of each kind of event
// (an entry never holds more, however many a proxy sends).
type work struct {
	disconnect *disconnectEvent
	health     *healthEvent
	cleanup    bool
	// attempts counts the failed tries of this work (retries back off).
	attempts int
}

// merge adds o's events to w, the later of each kind winning.
func (w *work) merge(o work) {
	if o.disconnect != nil {
		w.disconnect = o.disconnect
	}
	if o.health != nil && (w.health == nil || !o.health.at.Before(w.health.at)) {
		w.health = o.health
	}
	w.cleanup = w.cleanup || o.cleanup
	w.attempts = max(w.attempts, o.attempts)
}

// workQueue holds the pending work per entry, in arrival order, for the
// controller's one worker; timers add work later (grace periods, retries).
type workQueue struct {
	mu      sync.Mutex
	pending map[entryKey]*work
	order   []entryKey
	timers  map[*time.Timer]struct{}
	stopped bool
	kick    chan struct{}
}

func newWorkQueue() *workQueue {
	return &workQueue{pending: map[entryKey]*work{}, timers: map[*time.Timer]struct{}{}, kick: make(chan struct{}, 1)}
}

// add merges w into k's pending work and wakes the worker.
func (q *workQueue) add(k entryKey, w work) {
	q.mu.Lock()
	if cur := q.pending[k]; cur != nil {
		cur.merge(w)
	} else {
		q.pending[k] = &w
		q.order = append(q.order, k)
	}
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// after adds w to k once d has passed, unless the queue stopped.
func (q *workQueue) after(d time.Duration, k entryKey, w work) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		q.mu.Lock()
		delete(q.timers, t)
		stopped := q.stopped
		q.mu.Unlock()
		if !stopped {
			q.add(k, w)
		}
	})
	q.timers[t] = struct{}{}
}

// pop takes the oldest pending work; ok is false when there is none.
func (q *workQueue) pop() (entryKey, work, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		return entryKey{}, work{}, false
	}
	k := q.order[0]
	q.order = q.order[1:]
	w := q.pending[k]
	delete(q.pending, k)
	return k, *w, true
}

// stop cancels the timers; later after calls do nothing.
func (q *workQueue) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	for t := range q.timers {
		t.Stop()
	}
	clear(q.timers)
}
