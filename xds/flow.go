package xds

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Flow control: a response is "in flight" from its Send until the client
// ACKs or NACKs its nonce. gRPC's Send returns as soon as the message is
// queued, so without a bound a burst (500 new streams, or a full push to
// every proxy) queues one whole response per stream in server memory while
// slow readers catch up. The server keeps at most Options.MaxInflightBytes of
// responses in flight; a connection holds at most one reservation (it gives
// it back before sending again, so no connection waits while holding one),
// and a reservation comes back by itself after ackWait for clients that
// never answer. Istio's PILOT_ENABLE_FLOW_CONTROL applied the idea per proxy.
// A response whose resources are a body shared with other streams
// (shared_encoding.go) still reserves its whole size: measured, letting
// such responses through at once interleaves every stream's bytes on the
// connections and every proxy completes late (initial p50 2.2 s → 5.0 s at
// 500 proxies), where the budget finishes them a few at a time.
//
// A client that never reads nor answers must not be able to fill the budget
// that answering clients wait on. So the budget has two pools: connections
// that have answered their last response draw on the main pool; new
// connections, and ones whose last reservation expired unanswered, draw on a
// probation pool of half the size. A proxy that keeps answering is never
// delayed by bytes held for ones that do not.

const (
	// inflightBudget is the default of Options.MaxInflightBytes.
	inflightBudget = 16 << 20
	// ackWait is how long a response may hold its bytes without an answer.
	ackWait = 5 * time.Second
)

// flowPools are the two byte budgets of flow control.
type flowPools struct {
	max       int64
	answered  *semaphore.Weighted
	probation *semaphore.Weighted
}

func newFlowPools(max int64) flowPools {
	return flowPools{max: max, answered: semaphore.NewWeighted(max), probation: semaphore.NewWeighted(max / 2)}
}

// flowReservation is one in-flight response's share of the budget.
type flowReservation struct {
	once  sync.Once
	timer *time.Timer
	free  func()
}

func (r *flowReservation) give() { r.once.Do(r.free) }

// flowState is a connection's flow-control state; only its stream goroutine
// touches it, but for expired, set by the reservation's timer.
type flowState struct {
	// res is the in-flight reservation of the last response sent, and nonce
	// its nonce.
	res   *flowReservation
	nonce string
	// answering says the connection answered its last reservation's
	// response; it then draws on the main pool.
	answering bool
	// expired is set when a reservation came back unanswered.
	expired atomic.Bool
}

// awaitFlow reserves size bytes for c's next response, giving back what c
// holds first. It returns false when the stream (ctx) or the server stops.
// Only c's stream goroutine calls it.
func (c *Connection) awaitFlow(ctx context.Context, size int) bool {
	c.releaseFlow()
	if c.flow.expired.Swap(false) {
		c.flow.answering = false
	}
	pool, limit := c.s.flow.probation, c.s.flow.max/2
	if c.flow.answering {
		pool, limit = c.s.flow.answered, c.s.flow.max
	}
	n := min(max(int64(size), 1), limit)
	if !pool.TryAcquire(n) {
		wait, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(c.s.stopCtx, cancel)
		err := pool.Acquire(wait, n)
		stop()
		cancel()
		if err != nil {
			return false
		}
	}
	r := &flowReservation{free: func() { pool.Release(n) }}
	r.timer = time.AfterFunc(ackWait, func() {
		c.flow.expired.Store(true)
		r.give()
	})
	c.flow.res = r
	return true
}

// sentFlow ties c's reservation to the nonce just sent.
func (c *Connection) sentFlow(nonce string) { c.flow.nonce = nonce }

// answeredFlow gives c's reservation back when nonce answers it.
func (c *Connection) answeredFlow(nonce string) {
	if c.flow.res != nil && nonce == c.flow.nonce {
		c.flow.answering = !c.flow.expired.Load()
		c.releaseFlow()
	}
}

// releaseFlow gives c's reservation back, if it holds one.
func (c *Connection) releaseFlow() {
	if r := c.flow.res; r != nil {
		r.timer.Stop()
		r.give()
		c.flow.res, c.flow.nonce = nil, ""
	}
}
