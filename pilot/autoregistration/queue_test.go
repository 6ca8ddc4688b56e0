package autoregistration

import (
	"testing"
	"time"
)

// TestQueueCoalesces: an entry holds one pending work however many events
// arrive, the latest health report winning, in first-arrival order.
func TestQueueCoalesces(t *testing.T) {
	q := newWorkQueue()
	a, b := entryKey{"ns", "a"}, entryKey{"ns", "b"}
	t0 := time.Now()
	for i := range 1000 {
		q.add(a, work{health: &healthEvent{healthy: i%2 == 0, at: t0.Add(time.Duration(i))}})
	}
	q.add(b, work{cleanup: true})
	q.add(a, work{disconnect: &disconnectEvent{at: t0}})
	q.add(a, work{health: &healthEvent{healthy: true, at: t0}}) // older: ignored

	k, w, ok := q.pop()
	if !ok || k != a || w.health == nil || w.health.healthy || !w.health.at.Equal(t0.Add(999)) || w.disconnect == nil || w.cleanup {
		t.Fatalf("first: %v %+v", k, w)
	}
	k, w, ok = q.pop()
	if !ok || k != b || !w.cleanup {
		t.Fatalf("second: %v %+v", k, w)
	}
	if _, _, ok := q.pop(); ok {
		t.Fatal("a third work")
	}
}

// TestQueueAfter: delayed work arrives (and wakes the worker); after stop
// nothing more does.
func TestQueueAfter(t *testing.T) {
	q := newWorkQueue()
	k := entryKey{"ns", "a"}
	q.after(time.Millisecond, k, work{cleanup: true})
	<-q.kick
	if got, w, ok := q.pop(); !ok || got != k || !w.cleanup {
		t.Fatalf("delayed work: %v %+v %v", got, w, ok)
	}
	q.after(time.Hour, k, work{cleanup: true})
	q.stop()
	q.after(time.Millisecond, k, work{cleanup: true})
	q.mu.Lock()
	timers := len(q.timers)
	q.mu.Unlock()
	if timers != 0 {
		t.Fatalf("%d timers left after stop", timers)
	}
}
