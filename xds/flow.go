package xds

import (
	"context"
	"sync"
	"time"
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

const (
	// inflightBudget is the default of Options.MaxInflightBytes.
	inflightBudget = 16 << 20
	// ackWait is how long a response may hold its bytes without an answer.
	ackWait = 5 * time.Second
)

// flowReservation is one in-flight response's share of the budget.
type flowReservation struct {
	once  sync.Once
	timer *time.Timer
	free  func()
}

func (r *flowReservation) give() { r.once.Do(r.free) }

// awaitFlow reserves size bytes for c's next response, giving back what c
// holds first. It returns false when the stream (ctx) or the server stops.
// Only c's stream goroutine calls it.
func (c *Connection) awaitFlow(ctx context.Context, size int) bool {
	c.releaseFlow()
	n := min(max(int64(size), 1), c.s.opts.MaxInflightBytes)
	if !c.s.inflight.TryAcquire(n) {
		wait, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(c.s.stopCtx, cancel)
		err := c.s.inflight.Acquire(wait, n)
		stop()
		cancel()
		if err != nil {
			return false
		}
	}
	r := &flowReservation{free: func() { c.s.inflight.Release(n) }}
	r.timer = time.AfterFunc(ackWait, r.give)
	c.flow = r
	return true
}

// sentFlow ties c's reservation to the nonce just sent.
func (c *Connection) sentFlow(nonce string) { c.flowNonce = nonce }

// answeredFlow gives c's reservation back when nonce answers it.
func (c *Connection) answeredFlow(nonce string) {
	if c.flow != nil && nonce == c.flowNonce {
		c.releaseFlow()
	}
}

// releaseFlow gives c's reservation back, if it holds one.
func (c *Connection) releaseFlow() {
	if c.flow != nil {
		c.flow.timer.Stop()
		c.flow.give()
		c.flow, c.flowNonce = nil, ""
	}
}
