package xds

import (
	"context"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/model"
)

// A response holds its bytes until the client answers its nonce; a second
// connection waits for them; a wrong nonce frees nothing; Run's end frees
// every waiter.
func TestFlowControlHoldsBytesUntilAnswered(t *testing.T) {
	s := NewDiscoveryServer(&model.Environment{Endpoints: model.NewEndpointIndex()}, GeneratorTable{}, Options{MaxInflightBytes: 200})
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(runCtx) }()
	a := &Connection{s: s, stopped: make(chan struct{})}
	b := &Connection{s: s, stopped: make(chan struct{})}
	ctx := context.Background()
	// New connections draw on the probation pool (half of 200).
	if !a.awaitFlow(ctx, model.ClusterType, "n1", 80) {
		t.Fatal("first reservation refused")
	}
	got := make(chan bool, 1)
	go func() { got <- b.awaitFlow(ctx, model.ClusterType, "b1", 80) }()
	// b cannot have its 80 bytes while a holds 80 of 100.
	if s.flow.probation.available() >= 21 {
		t.Fatal("budget not held by a")
	}
	a.answeredFlow(model.ClusterType, "stale-nonce")
	if s.flow.probation.available() >= 21 {
		t.Fatal("a wrong nonce released the reservation")
	}
	a.answeredFlow(model.ClusterType, "n1")
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("b's reservation refused")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b still waiting after a's response was answered")
	}
	// A third waiter is released when the server stops.
	c := &Connection{s: s, stopped: make(chan struct{})}
	done := make(chan bool, 1)
	go func() { done <- c.awaitFlow(ctx, model.ClusterType, "c1", 100) }()
	stopRun()
	<-ran
	select {
	case ok := <-done:
		if ok {
			t.Fatal("reservation granted after stop")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not released by stop")
	}
	b.releaseFlow()
	if s.flow.probation.available() < 100 {
		t.Fatal("probation budget not fully returned")
	}
}

// Connections that never answer fill only the probation pool: one that
// answered its last response reserves from the main pool without waiting
// for them, and goes back to probation once a reservation expires unanswered.
func TestFlowControlSilentClientsCannotStarveAnsweringOnes(t *testing.T) {
	s := NewDiscoveryServer(&model.Environment{Endpoints: model.NewEndpointIndex()}, GeneratorTable{}, Options{MaxInflightBytes: 200})
	ctx := context.Background()
	healthy := &Connection{s: s, stopped: make(chan struct{})}
	if !healthy.awaitFlow(ctx, model.ClusterType, "h1", 50) {
		t.Fatal("healthy first reservation refused")
	}
	healthy.answeredFlow(model.ClusterType, "h1")
	// Silent connections take the whole probation pool and never answer.
	silent := &Connection{s: s, stopped: make(chan struct{})}
	if !silent.awaitFlow(ctx, model.ClusterType, "s1", 100) {
		t.Fatal("silent reservation refused")
	}
	if s.flow.probation.available() >= 1 {
		t.Fatal("probation pool not full")
	}
	// The answering connection is not held up: it draws on the main pool.
	if !tryAwait(healthy, "h2", 200) {
		t.Fatal("answering connection waited for the silent one's bytes")
	}
	// Its reservation expires unanswered: the next one is on probation.
	healthy.flow.mu.Lock()
	healthy.flow.res[model.ClusterType].timer.Reset(time.Millisecond)
	healthy.flow.mu.Unlock()
	eventually(t, "expired reservation returned", func() bool {
		healthy.flow.mu.Lock()
		defer healthy.flow.mu.Unlock()
		return healthy.flow.expired
	})
	healthy.answeredFlow(model.ClusterType, "h2") // late answer: still on probation
	silent.releaseFlow()
	if !healthy.awaitFlow(ctx, model.ClusterType, "h3", 10) {
		t.Fatal("reservation refused")
	}
	if s.flow.probation.available() >= 91 {
		t.Fatal("late-answering connection did not draw on the probation pool")
	}
	healthy.releaseFlow()
}

// tryAwait is awaitFlow that must not wait.
func tryAwait(c *Connection, nonce string, size int) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return c.awaitFlow(ctx, model.ClusterType, nonce, size)
}

// The pool serves the peer least recently served first: with one host
// holding the pool and more of its streams waiting, a stream of another
// host is served at the next release; a waiter larger than what is free
// is not jumped; and another peer's arrival brings the holder's expiry
// forward to half of ackWait.
func TestFairPoolServesPeersInTurn(t *testing.T) {
	const wait = time.Hour
	p := newFairPool(100, wait, true)
	ctx := context.Background()
	q, ok := p.tryAcquire("A", 100)
	if !ok {
		t.Fatal("first grant refused")
	}
	holder := &flowReservation{key: q, n: 100}
	p.hold(holder, func() {})
	defer holder.timer.Stop()
	type grant struct {
		who string
		q   *peerQueue
	}
	granted := make(chan grant, 4)
	waitFor := func(who, key string, n int64) {
		go func() {
			q, err := p.acquire(ctx, key, n)
			if err != nil {
				t.Errorf("%s: %v", who, err)
			}
			granted <- grant{who, q}
		}()
		eventually(t, who+" waiting", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.keys[key] == nil {
				return false
			}
			for _, w := range p.keys[key].waiters {
				if w.n == n {
					return true
				}
			}
			return false
		})
	}
	waitFor("A2", "A", 60)
	p.mu.Lock()
	if holder.deadline.Sub(holder.at) != wait {
		t.Errorf("hold %v with only its own host waiting, want %v", holder.deadline.Sub(holder.at), wait)
	}
	p.mu.Unlock()
	waitFor("B1", "B", 60)
	p.mu.Lock()
	if got := holder.deadline.Sub(holder.at); got != wait/2 {
		t.Errorf("hold %v with another host waiting, want %v", got, wait/2)
	}
	p.mu.Unlock()
	p.release(holder)
	first := <-granted
	if first.who != "B1" {
		t.Fatalf("%s served first, want B1 (A was served last)", first.who)
	}
	p.mu.Lock()
	if len(p.keys["A"].waiters) != 1 {
		t.Error("A2 served with only 40 bytes free")
	}
	p.mu.Unlock()
	p.release(&flowReservation{key: first.q, n: 60})
	if g := <-granted; g.who != "A2" {
		t.Fatalf("%s served, want A2", g.who)
	}
}
