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
	s := NewDiscoveryServer(&model.Environment{Endpoints: model.NewEndpointIndex()}, GeneratorTable{}, Options{MaxInflightBytes: 100})
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(runCtx) }()
	a := &Connection{s: s, stopped: make(chan struct{})}
	b := &Connection{s: s, stopped: make(chan struct{})}
	ctx := context.Background()
	if !a.awaitFlow(ctx, 80) {
		t.Fatal("first reservation refused")
	}
	a.sentFlow("n1")
	got := make(chan bool, 1)
	go func() { got <- b.awaitFlow(ctx, 80) }()
	// b cannot have its 80 bytes while a holds 80 of 100.
	if s.inflight.TryAcquire(21) {
		t.Fatal("budget not held by a")
	}
	a.answeredFlow("stale-nonce")
	if s.inflight.TryAcquire(21) {
		t.Fatal("a wrong nonce released the reservation")
	}
	a.answeredFlow("n1")
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
	go func() { done <- c.awaitFlow(ctx, 100) }()
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
	if !s.inflight.TryAcquire(100) {
		t.Fatal("budget not fully returned")
	}
}
