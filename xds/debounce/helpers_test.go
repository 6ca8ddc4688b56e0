package debounce

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/model"
)

// manualClock is a clock that only moves when Advance is called.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*manualTimer]struct{}
}

type manualTimer struct {
	at time.Time
	c  chan time.Time
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), timers: map[*manualTimer]struct{}{}}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) At(t time.Time) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &manualTimer{at: t, c: make(chan time.Time, 1)}
	if !t.After(c.now) {
		tm.c <- c.now
		return tm.c, func() {}
	}
	c.timers[tm] = struct{}{}
	return tm.c, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.timers, tm)
	}
}

// Advance moves the clock forward and fires the timers that came due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for tm := range c.timers {
		if !tm.at.After(c.now) {
			tm.c <- c.now
			delete(c.timers, tm)
		}
	}
}

// recorder is an output function that records what it receives, counts
// concurrent calls and can hold each call until released.
type recorder struct {
	mu        sync.Mutex
	calls     []*model.PushRequest
	active    atomic.Int32
	maxActive atomic.Int32
	started   chan struct{} // receives at the start of each call, if non-nil
	gate      chan struct{} // each call waits for a token, if non-nil
}

func (r *recorder) out(req *model.PushRequest) {
	n := r.active.Add(1)
	for {
		m := r.maxActive.Load()
		if n <= m || r.maxActive.CompareAndSwap(m, n) {
			break
		}
	}
	r.mu.Lock()
	r.calls = append(r.calls, req)
	r.mu.Unlock()
	if r.started != nil {
		r.started <- struct{}{}
	}
	if r.gate != nil {
		<-r.gate
	}
	r.active.Add(-1)
}

func (r *recorder) call(t *testing.T, i int) *model.PushRequest {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.calls) {
		t.Fatalf("want call %d, got %d calls", i, len(r.calls))
	}
	return r.calls[i]
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// waitFlushed waits until d has flushed n requests.
func waitFlushed(t *testing.T, d *Debouncer, n uint64) {
	t.Helper()
	waitFor(t, "flush", func() bool { return d.Flushed() >= n })
}

// start runs d until the test ends and returns a channel closed when Run returns.
func start(t *testing.T, d *Debouncer) (context.CancelFunc, <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return cancel, done
}

func key(kind model.Kind, name string) model.ConfigKey {
	return model.ConfigKey{Kind: kind, Name: name, Namespace: "default"}
}

func full(reason model.TriggerReason, name string) *model.PushRequest {
	return model.NewPushRequest(true, reason, key(model.KindVirtualService, name))
}

func eds(name string) *model.PushRequest {
	return model.NewPushRequest(false, model.ReasonEndpointUpdate, key(model.KindEndpoints, name))
}

func hasKeys(t *testing.T, req *model.PushRequest, keys ...model.ConfigKey) {
	t.Helper()
	if len(req.ConfigsUpdated) != len(keys) {
		t.Errorf("ConfigsUpdated has %d keys, want %d: %v", len(req.ConfigsUpdated), len(keys), req.ConfigsUpdated)
	}
	for _, k := range keys {
		if _, ok := req.ConfigsUpdated[k]; !ok {
			t.Errorf("ConfigsUpdated lacks %v", k)
		}
	}
}
