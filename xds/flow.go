package xds

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshpilot/meshpilot/model"
)

// Flow control: a response is "in flight" from its Send until the client
// ACKs or NACKs its nonce. gRPC's Send returns as soon as the message is
// queued, so without a bound a burst (5,000 new streams, or a full push to
// every proxy) queues whole responses per stream in server memory while
// slow readers catch up. Every response therefore reserves its size from a
// byte budget before it is sent and holds it until the client answers its
// nonce, a newer response of the same type replaces it, ackWait passes
// (a client that never answers), or the stream ends. Admission is by cost:
// a storm of new streams gets its config as fast as the clients read it,
// never more than the budget at a time, whatever the number of streams.
// Istio's PILOT_ENABLE_FLOW_CONTROL applied the idea per proxy.
//
// A connection may hold one reservation per type while it waits for the
// next (CDS unanswered while LDS waits): that cannot deadlock, because
// answers are taken off the stream by its receiving goroutine
// (serveStream), which never waits for budget, and reservations expire.
//
// A response whose resources are a body shared with other streams
// (shared_encoding.go) still reserves its whole size: measured, letting
// such responses through at once interleaves every stream's bytes on the
// connections and every proxy completes late (initial p50 2.2 s -> 5.0 s at
// 500 proxies), where the budget finishes them a few at a time.
//
// A client that never reads nor answers must not be able to fill the budget
// that answering clients wait on. So the budget has two pools: connections
// that have answered their last response draw on the main pool
// (Options.MaxInflightBytes); new connections, and ones whose last
// reservation expired unanswered, draw on a probation pool of half the
// size. A proxy that keeps answering is never delayed by bytes held for
// ones that do not. At most 1.5 × MaxInflightBytes are reserved at once.
//
// Nor may silent streams delay a new proxy's first response without bound
// (issue 32): with one FIFO, each of 150 silent streams held the probation
// pool for ackWait in turn before a new proxy had anything. So both pools
// serve waiters by peer (flowpool.go; the verified identity, else the
// host), the peer least recently served first, and a probation reservation
// lasts only ackWait/(1+peers waiting), at least ackWait/5, while other
// peers wait. A new proxy then waits for one turn per peer ahead of it, each
// at most about ackWait/2 when one host's streams keep the pool, however
// many streams that host opens.

const (
	// inflightBudget is the default of Options.MaxInflightBytes.
	inflightBudget = 16 << 20
	// ackWait is how long a response may hold its bytes without an answer.
	ackWait = 5 * time.Second
	// probationMinHoldDiv bounds how far a probation reservation's hold
	// shrinks while other peers wait: never below ackWait/probationMinHoldDiv
	// (1 s by default), so that a storm of honest proxies, each on its own
	// host, still finishes a few responses at a time.
	probationMinHoldDiv = 5
)

// flowPools are the two byte budgets of flow control.
type flowPools struct {
	max       int64
	answered  *fairPool
	probation *fairPool
	// ackWait is how long a reservation lasts unanswered (Options.ackWait).
	ackWait time.Duration
	// held is the bytes reserved now from both pools, peak the most ever.
	held, peak atomic.Int64
}

func newFlowPools(max int64, wait time.Duration) *flowPools {
	if wait <= 0 {
		wait = ackWait
	}
	return &flowPools{
		max:       max,
		answered:  newFairPool(max, wait, false),
		probation: newFairPool(max/2, wait, true),
		ackWait:   wait,
	}
}

// take records n more bytes reserved.
func (p *flowPools) take(n int64) {
	h := p.held.Add(n)
	for {
		old := p.peak.Load()
		if h <= old || p.peak.CompareAndSwap(old, h) {
			return
		}
	}
}

// Peak returns the most bytes ever reserved at once.
func (p *flowPools) Peak() int64 { return p.peak.Load() }

// flowReservation is one in-flight response's share of the budget.
type flowReservation struct {
	nonce string
	once  sync.Once
	timer *time.Timer
	free  func()
	// pool, key, n, at and deadline are the pool's (under its lock): where
	// the bytes came from, how many, when, and when they expire unanswered.
	pool         *fairPool
	key          *peerQueue
	n            int64
	at, deadline time.Time
}

func (r *flowReservation) give() { r.once.Do(r.free) }

// flowState is a connection's flow-control state. The stream goroutine
// reserves; the receiving goroutine and the reservations' timers give back,
// so it has its own lock.
type flowState struct {
	mu sync.Mutex
	// key is the peer the connection's waits are queued under (flowKey).
	key string
	// res are the reservations of the responses in flight, by type URL.
	res map[string]*flowReservation
	// answering says the connection answered its last response in time; it
	// then draws on the main pool.
	answering bool
	// expired is set when a reservation came back unanswered.
	expired bool
}

// flowKey is the peer a connection's flow-control waits are queued under:
// its verified identity when the listener authenticated one, else the host
// of its address (every stream of one host shares one turn). Proxies behind
// one NAT share a key, and so do silent streams from the host of an honest
// proxy: those still wait behind each other, in order.
func flowKey(id *model.VerifiedIdentity, peerAddr string) string {
	if id != nil && id.SPIFFE != "" {
		return "id:" + id.SPIFFE
	}
	if host, _, err := net.SplitHostPort(peerAddr); err == nil {
		return "ip:" + host
	}
	return "addr:" + peerAddr
}

// awaitFlow reserves size bytes for c's next response of typeURL, whose
// nonce is nonce, giving back what the previous response of that type
// holds. It returns false when the stream (ctx) or the server stops. Only
// c's stream goroutine calls it.
func (c *Connection) awaitFlow(ctx context.Context, typeURL, nonce string, size int) bool {
	pools := c.s.flow
	c.flow.mu.Lock()
	if r := c.flow.res[typeURL]; r != nil {
		delete(c.flow.res, typeURL)
		r.timer.Stop()
		r.give()
	}
	if c.flow.expired {
		c.flow.answering, c.flow.expired = false, false
	}
	pool := pools.probation
	if c.flow.answering {
		pool = pools.answered
	}
	key := c.flow.key
	c.flow.mu.Unlock()
	// A response larger than the pool takes all of it, alone.
	n := min(max(int64(size), 1), pool.size)
	q, ok := pool.tryAcquire(key, n)
	if !ok {
		wait, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(c.s.stopCtx, cancel)
		var err error
		q, err = pool.acquire(wait, key, n)
		stop()
		cancel()
		if err != nil {
			return false
		}
	}
	pools.take(n)
	r := &flowReservation{nonce: nonce, pool: pool, key: q, n: n}
	r.free = func() {
		pools.held.Add(-n)
		pool.release(r)
	}
	c.flow.mu.Lock()
	if c.flow.res == nil {
		c.flow.res = map[string]*flowReservation{}
	}
	c.flow.res[typeURL] = r
	pool.hold(r, func() {
		c.flow.mu.Lock()
		if c.flow.res[typeURL] == r {
			delete(c.flow.res, typeURL)
			c.flow.expired = true
		}
		c.flow.mu.Unlock()
		r.give()
	})
	c.flow.mu.Unlock()
	return true
}

// answeredFlow gives back c's reservation for typeURL when nonce answers
// it. Any goroutine may call it; it is called for every request as it is
// received, so that a stream goroutine waiting for budget gets its own
// bytes back.
func (c *Connection) answeredFlow(typeURL, nonce string) {
	if nonce == "" {
		return
	}
	c.flow.mu.Lock()
	r := c.flow.res[typeURL]
	if r == nil || r.nonce != nonce {
		c.flow.mu.Unlock()
		return
	}
	delete(c.flow.res, typeURL)
	c.flow.answering = !c.flow.expired
	c.flow.mu.Unlock()
	r.timer.Stop()
	r.give()
}

// releaseFlowType gives back c's reservation for typeURL (its send failed).
func (c *Connection) releaseFlowType(typeURL string) {
	c.flow.mu.Lock()
	r := c.flow.res[typeURL]
	delete(c.flow.res, typeURL)
	c.flow.mu.Unlock()
	if r != nil {
		r.timer.Stop()
		r.give()
	}
}

// releaseFlow gives back every reservation c holds (the stream ended).
func (c *Connection) releaseFlow() {
	c.flow.mu.Lock()
	res := c.flow.res
	c.flow.res = nil
	c.flow.mu.Unlock()
	for _, r := range res {
		r.timer.Stop()
		r.give()
	}
}
