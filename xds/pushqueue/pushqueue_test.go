package pushqueue

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/model"
)

func req(name string) *model.PushRequest {
	return model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: model.KindVirtualService, Name: name, Namespace: "default"})
}

func mustDequeue(t *testing.T, q *Queue[string]) (string, *model.PushRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k, r, ok := q.Dequeue(ctx)
	if !ok {
		t.Fatalf("Dequeue: got nothing")
	}
	return k, r
}

func wantNames(t *testing.T, r *model.PushRequest, names ...string) {
	t.Helper()
	if len(r.ConfigsUpdated) != len(names) {
		t.Errorf("ConfigsUpdated = %v, want %v", r.ConfigsUpdated, names)
	}
	for _, n := range names {
		if _, ok := r.ConfigsUpdated[model.ConfigKey{Kind: model.KindVirtualService, Name: n, Namespace: "default"}]; !ok {
			t.Errorf("ConfigsUpdated lacks %q", n)
		}
	}
	if got := r.Reason[model.ReasonConfigUpdate]; got != len(names) {
		t.Errorf("Reason[config] = %d, want %d", got, len(names))
	}
}

func TestEnqueueMergesSameKey(t *testing.T) {
	q := New[string]()
	q.Enqueue("a", req("x"))
	q.Enqueue("b", req("z"))
	q.Enqueue("a", req("y"))
	q.Enqueue("a", nil)
	if n := q.Len(); n != 2 {
		t.Fatalf("Len() = %d, want 2", n)
	}
	k, r := mustDequeue(t, q)
	if k != "a" {
		t.Fatalf("Dequeue key = %q, want a", k)
	}
	wantNames(t, r, "x", "y")
}

func TestFIFOOrderOfFirstEnqueue(t *testing.T) {
	q := New[string]()
	for _, k := range []string{"a", "b", "c", "a", "b", "d"} {
		q.Enqueue(k, req(k))
	}
	for _, want := range []string{"a", "b", "c", "d"} {
		k, _ := mustDequeue(t, q)
		if k != want {
			t.Fatalf("Dequeue key = %q, want %q", k, want)
		}
		q.MarkDone(k)
	}
	if n := q.Len(); n != 0 {
		t.Errorf("Len() = %d, want 0", n)
	}
}

func TestInProgressKeyIsHeldAndRequeuedOnMarkDone(t *testing.T) {
	q := New[string]()
	q.Enqueue("a", req("1"))
	k, _ := mustDequeue(t, q)
	if k != "a" {
		t.Fatalf("Dequeue key = %q, want a", k)
	}
	q.Enqueue("a", req("2"))
	q.Enqueue("a", req("3"))
	if n := q.Len(); n != 0 {
		t.Fatalf("Len() = %d while a is in progress, want 0", n)
	}
	q.Enqueue("b", req("b"))
	if k, _ := mustDequeue(t, q); k != "b" {
		t.Fatalf("Dequeue key = %q, want b (a is in progress)", k)
	}
	q.MarkDone("a")
	if n := q.Len(); n != 1 {
		t.Fatalf("Len() = %d after MarkDone, want 1", n)
	}
	k, r := mustDequeue(t, q)
	if k != "a" {
		t.Fatalf("Dequeue key = %q, want a", k)
	}
	wantNames(t, r, "2", "3")

	// Nothing held: MarkDone re-queues nothing; unknown keys are ignored.
	q.MarkDone("a")
	q.MarkDone("b")
	q.MarkDone("never")
	if n := q.Len(); n != 0 {
		t.Errorf("Len() = %d, want 0", n)
	}
}

func TestRemove(t *testing.T) {
	q := New[string]()
	for _, k := range []string{"a", "b", "c"} {
		q.Enqueue(k, req(k))
	}
	q.Remove("b")
	q.Remove("unknown")
	if n := q.Len(); n != 2 {
		t.Fatalf("Len() = %d after Remove, want 2", n)
	}
	for _, want := range []string{"a", "c"} {
		if k, _ := mustDequeue(t, q); k != want {
			t.Fatalf("Dequeue key = %q, want %q", k, want)
		}
	}

	// In progress: held requests are dropped and MarkDone re-queues nothing.
	q.Enqueue("a", req("held"))
	q.Remove("a")
	q.MarkDone("a")
	if n := q.Len(); n != 0 {
		t.Fatalf("Len() = %d after Remove of an in-progress key, want 0", n)
	}

	// A removed key can come back.
	q.Enqueue("b", req("again"))
	k, r := mustDequeue(t, q)
	if k != "b" {
		t.Fatalf("Dequeue key = %q, want b", k)
	}
	wantNames(t, r, "again")
}

func TestCloseUnblocksDequeue(t *testing.T) {
	q := New[string]()
	result := make(chan bool)
	for range 3 {
		go func() {
			_, _, ok := q.Dequeue(context.Background())
			result <- ok
		}()
	}
	q.Close()
	q.Close()
	for range 3 {
		select {
		case ok := <-result:
			if ok {
				t.Errorf("Dequeue after Close: ok = true")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Dequeue still blocked after Close")
		}
	}
	q.Enqueue("a", req("a"))
	if n := q.Len(); n != 0 {
		t.Errorf("Len() = %d after Enqueue on a closed queue, want 0", n)
	}
	if _, _, ok := q.Dequeue(context.Background()); ok {
		t.Errorf("Dequeue on a closed queue: ok = true")
	}
}

func TestDequeueReturnsWhenContextDone(t *testing.T) {
	q := New[string]()
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan bool)
	go func() {
		_, _, ok := q.Dequeue(ctx)
		result <- ok
	}()
	cancel()
	select {
	case ok := <-result:
		if ok {
			t.Errorf("Dequeue with a cancelled context: ok = true")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Dequeue still blocked after cancel")
	}
}

func TestConcurrentProducersAndConsumers(t *testing.T) {
	const producers, consumers, perProducer, keys = 4, 4, 500, 37
	q := New[int]()

	var (
		mu       sync.Mutex
		busy     = map[int]bool{}
		reasons  int
		overlaps int
	)
	var workers sync.WaitGroup
	for range consumers {
		workers.Go(func() {
			for {
				k, r, ok := q.Dequeue(context.Background())
				if !ok {
					return
				}
				mu.Lock()
				if busy[k] {
					overlaps++
				}
				busy[k] = true
				reasons += r.Reason[model.ReasonConfigUpdate]
				mu.Unlock()
				runtime.Gosched() // widen the window in which an overlap would show

				mu.Lock()
				busy[k] = false
				mu.Unlock()
				q.MarkDone(k)
			}
		})
	}
	var producing sync.WaitGroup
	for p := range producers {
		producing.Go(func() {
			for i := range perProducer {
				q.Enqueue((p*perProducer+i)%keys, req(fmt.Sprint(p, "-", i)))
			}
		})
	}
	producing.Wait()

	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		mu.Lock()
		n := reasons
		mu.Unlock()
		if n == producers*perProducer {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers saw %d requests, want %d", n, producers*perProducer)
		}
		<-tick.C
	}
	q.Close()
	workers.Wait()
	if overlaps != 0 {
		t.Errorf("%d times a key was handed to two consumers at once", overlaps)
	}
}

func BenchmarkQueue(b *testing.B) {
	const keys = 1000
	q := New[int]()
	r := model.NewPushRequest(true, model.ReasonConfigUpdate)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for k := range keys {
			q.Enqueue(k, r)
		}
		for range keys {
			k, _, _ := q.Dequeue(ctx)
			q.MarkDone(k)
		}
	}
}
