// Package pushqueue holds the per-connection push work of the xDS server:
// one pending push request per key (connection), merged while it waits,
// handed out in the order keys were first enqueued, and never to two
// workers at once for the same key.
package pushqueue

import (
	"context"
	"slices"
	"sync"

	"github.com/meshpilot/meshpilot/model"
)

// Queue is a FIFO of keys with one merged push request each. A key that a
// worker has dequeued stays "in progress" until MarkDone; requests for it in
// the meantime are held, merged, and re-queued by MarkDone. All methods are
// safe for concurrent use.
type Queue[K comparable] struct {
	mu sync.Mutex
	// order lists the keys waiting, in order of first enqueue.
	order []K
	// pending is the merged request of each key in order.
	pending map[K]*model.PushRequest
	// inProgress maps each dequeued key to the requests held for it (nil if none).
	inProgress map[K]*model.PushRequest
	closed     bool

	// ready holds a token when order may be non-empty.
	ready chan struct{}
	// done is closed by Close.
	done chan struct{}
}

// New returns an empty queue.
func New[K comparable]() *Queue[K] {
	return &Queue[K]{
		pending:    map[K]*model.PushRequest{},
		inProgress: map[K]*model.PushRequest{},
		ready:      make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
}

// Enqueue adds req for key, merging (model.PushRequest.Merge) with a
// request already waiting for key, which keeps its place in line. If key is
// in progress, req is held until MarkDone. Nil requests and requests after
// Close are dropped.
func (q *Queue[K]) Enqueue(key K, req *model.PushRequest) {
	if req == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if held, ok := q.inProgress[key]; ok {
		q.inProgress[key] = held.Merge(req)
		return
	}
	if p, ok := q.pending[key]; ok {
		q.pending[key] = p.Merge(req)
		return
	}
	q.pending[key] = req
	q.order = append(q.order, key)
	q.signal()
}

// Dequeue removes the first key and its request and marks the key in
// progress; the caller must call MarkDone(key) when done with it. It blocks
// until a key is available, ctx is done or the queue is closed; ok is false
// in the last two cases.
func (q *Queue[K]) Dequeue(ctx context.Context) (key K, req *model.PushRequest, ok bool) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return key, nil, false
		}
		if len(q.order) > 0 {
			key = q.order[0]
			var zero K
			q.order[0] = zero
			q.order = q.order[1:]
			req = q.pending[key]
			delete(q.pending, key)
			q.inProgress[key] = nil
			if len(q.order) > 0 {
				// Pass the wake-up on to another waiting worker.
				q.signal()
			}
			q.mu.Unlock()
			return key, req, true
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return key, nil, false
		case <-q.done:
		case <-q.ready:
		}
	}
}

// MarkDone ends the processing of key. Requests enqueued for it meanwhile
// go to the back of the queue as one merged request.
func (q *Queue[K]) MarkDone(key K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	held, ok := q.inProgress[key]
	if !ok {
		return
	}
	delete(q.inProgress, key)
	if held == nil || q.closed {
		return
	}
	q.pending[key] = held
	q.order = append(q.order, key)
	q.signal()
}

// Remove drops the waiting and held requests of key (its connection is
// gone). A key in progress stays so until MarkDone.
func (q *Queue[K]) Remove(key K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.pending[key]; ok {
		delete(q.pending, key)
		if i := slices.Index(q.order, key); i >= 0 {
			q.order = slices.Delete(q.order, i, i+1)
		}
	}
	if _, ok := q.inProgress[key]; ok {
		q.inProgress[key] = nil
	}
}

// Len returns the number of keys waiting (not counting those in progress).
func (q *Queue[K]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

// Close shuts the queue down: blocked and later Dequeue calls return false,
// and later Enqueue calls are dropped. Close is idempotent.
func (q *Queue[K]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	q.order, q.pending, q.inProgress = nil, map[K]*model.PushRequest{}, map[K]*model.PushRequest{}
	close(q.done)
}

// signal records that a key may be available; q.mu must be held.
func (q *Queue[K]) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}
