package xds

import (
	"context"
	"sync"
	"time"
)

// A fairPool is one byte budget of flow control (flow.go). Unlike one FIFO
// semaphore, it queues waiters by peer (flowKey) and serves the peer least
// recently served first, each peer's own waiters in order: a host with
// 2,000 streams waiting gets one turn, like a host with one, so a proxy on
// another host waits for at most one turn per peer ahead of it, not for
// every stream. Order is strict: the next waiter is served as soon as its
// bytes are free and nobody jumps ahead of it, so a response as large as
// the whole pool is served alone and never starves.
//
// In the probation pool (shrink), reservations also shrink with the number
// waiting: while other peers wait, an unanswered reservation lasts
// ackWait/(1+peers waiting), at least ackWait/probationMinHoldDiv, instead
// of ackWait. A silent host therefore holds the pool for less time the
// more peers it keeps waiting; istiod has no such budget to share.
type fairPool struct {
	// size is the pool's bytes; ackWait and shrink set reservations' holds.
	size    int64
	ackWait time.Duration
	shrink  bool

	mu   sync.Mutex
	free int64
	// keys are the peers holding or waiting for bytes; waiting those with
	// waiters.
	keys    map[string]*peerQueue
	waiting map[*peerQueue]struct{}
	// seq orders grants and arrivals.
	seq uint64
}

// peerQueue is one peer's share of a fairPool.
type peerQueue struct {
	name string
	// served is the seq of the peer's last grant (0: none yet); since, of
	// its first waiter. The waiting peer with the lowest (served, since)
	// is served next.
	served, since uint64
	waiters       []*poolWaiter
	// held is the bytes granted and not given back; holders are the
	// reservations among them, whose expiry shrinks.
	held    int64
	holders map[*flowReservation]struct{}
}

// poolWaiter is one waiting acquire; ready is closed when it is granted.
type poolWaiter struct {
	n       int64
	granted bool
	ready   chan struct{}
}

func newFairPool(size int64, ackWait time.Duration, shrink bool) *fairPool {
	return &fairPool{size: size, ackWait: ackWait, shrink: shrink, free: size,
		keys: map[string]*peerQueue{}, waiting: map[*peerQueue]struct{}{}}
}

// tryAcquire grants n bytes to key if they are free and nobody waits.
func (p *fairPool) tryAcquire(key string, n int64) (*peerQueue, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiting) != 0 || n > p.free {
		return nil, false
	}
	q := p.queue(key)
	p.grant(q, n)
	return q, true
}

// acquire waits for n bytes (at most size) for key, in turn, until ctx ends.
func (p *fairPool) acquire(ctx context.Context, key string, n int64) (*peerQueue, error) {
	p.mu.Lock()
	q := p.queue(key)
	if len(p.waiting) == 0 && n <= p.free {
		p.grant(q, n)
		p.mu.Unlock()
		return q, nil
	}
	w := &poolWaiter{n: n, ready: make(chan struct{})}
	q.waiters = append(q.waiters, w)
	first := len(q.waiters) == 1
	if first {
		p.seq++
		q.since = p.seq
		p.waiting[q] = struct{}{}
	}
	p.dispatch()
	if first && !w.granted {
		p.hurry()
	}
	p.mu.Unlock()

	select {
	case <-w.ready:
		return q, nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.granted {
		p.free += n
		q.held -= n
	} else {
		i := 0
		for q.waiters[i] != w {
			i++
		}
		q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
		if len(q.waiters) == 0 {
			delete(p.waiting, q)
		}
	}
	p.forget(q)
	p.dispatch()
	return nil, ctx.Err()
}

// hold registers r, granted from r.key, and starts its expiry timer, which
// calls expire.
func (p *fairPool) hold(r *flowReservation, expire func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.at = time.Now()
	r.deadline = r.at.Add(p.holdFor(r.key))
	r.key.holders[r] = struct{}{}
	r.timer = time.AfterFunc(r.deadline.Sub(r.at), expire)
}

// release gives back r's bytes.
func (p *fairPool) release(r *flowReservation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := r.key
	delete(q.holders, r)
	q.held -= r.n
	p.free += r.n
	p.forget(q)
	p.dispatch()
}

// available returns the bytes free now.
func (p *fairPool) available() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.free
}

// queue returns key's peerQueue, made if none. p.mu is held.
func (p *fairPool) queue(key string) *peerQueue {
	q := p.keys[key]
	if q == nil {
		q = &peerQueue{name: key, holders: map[*flowReservation]struct{}{}}
		p.keys[key] = q
	}
	return q
}

// forget drops q once it holds and waits for nothing. p.mu is held.
func (p *fairPool) forget(q *peerQueue) {
	if q.held == 0 && len(q.waiters) == 0 && p.keys[q.name] == q {
		delete(p.keys, q.name)
	}
}

// grant gives n bytes to q. p.mu is held.
func (p *fairPool) grant(q *peerQueue, n int64) {
	p.free -= n
	q.held += n
	p.seq++
	q.served = p.seq
}

// dispatch serves waiters in turn while the next one's bytes are free.
// p.mu is held.
func (p *fairPool) dispatch() {
	for len(p.waiting) != 0 {
		var next *peerQueue
		for q := range p.waiting {
			if next == nil || q.served < next.served || q.served == next.served && q.since < next.since {
				next = q
			}
		}
		w := next.waiters[0]
		if w.n > p.free {
			return
		}
		p.grant(next, w.n)
		next.waiters[0] = nil
		next.waiters = next.waiters[1:]
		if len(next.waiters) == 0 {
			delete(p.waiting, next)
		}
		w.granted = true
		close(w.ready)
	}
}

// holdFor is how long a reservation of q lasts unanswered now. p.mu is held.
func (p *fairPool) holdFor(q *peerQueue) time.Duration {
	others := len(p.waiting)
	if _, waits := p.waiting[q]; waits {
		others--
	}
	if !p.shrink || others == 0 {
		return p.ackWait
	}
	return max(p.ackWait/time.Duration(1+others), p.ackWait/probationMinHoldDiv)
}

// hurry brings the expiry of the reservations held forward to their
// current holdFor, after one more peer started waiting. Once the holds are
// at their floor there is nothing to bring forward. p.mu is held.
func (p *fairPool) hurry() {
	if !p.shrink || len(p.waiting) > probationMinHoldDiv {
		return
	}
	now := time.Now()
	for _, q := range p.keys {
		if len(q.holders) == 0 {
			continue
		}
		hold := p.holdFor(q)
		for r := range q.holders {
			if d := r.at.Add(hold); d.Before(r.deadline) {
				r.deadline = d
				r.timer.Reset(max(d.Sub(now), 0))
			}
		}
	}
}
