package debounce

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/monitoring"
)

const after = 100 * time.Millisecond

func TestBurstMergesIntoOneEmission(t *testing.T) {
	clk := newManualClock()
	rec := &recorder{}
	m := monitoring.New(prometheus.NewRegistry())
	d := newWithClock(Options{After: after, Max: 10 * time.Second, EDSDebounce: true}, rec.out, m, nil, clk)
	start(t, d)

	var keys []model.ConfigKey
	for i := range 10 {
		reason := model.ReasonConfigUpdate
		if i%2 == 1 {
			reason = model.ReasonServiceUpdate
		}
		req := full(reason, fmt.Sprintf("vs-%d", i))
		keys = append(keys, key(model.KindVirtualService, fmt.Sprintf("vs-%d", i)))
		d.Enqueue(req)
	}
	clk.Advance(after)
	waitFlushed(t, d, 1)

	got := rec.call(t, 0)
	if !got.Full {
		t.Errorf("Full = false, want true")
	}
	hasKeys(t, got, keys...)
	if got.Reason[model.ReasonConfigUpdate] != 5 || got.Reason[model.ReasonServiceUpdate] != 5 || len(got.Reason) != 2 {
		t.Errorf("Reason = %v, want config=5 service=5", got.Reason)
	}
	if v := counter(t, m.PushTriggers.WithLabelValues("config")); v != 5 {
		t.Errorf("pilot_push_triggers{type=config} = %v, want 5", v)
	}
	if v := counter(t, m.PushTriggers.WithLabelValues("service")); v != 5 {
		t.Errorf("pilot_push_triggers{type=service} = %v, want 5", v)
	}
	if n, sum := histogram(t, m.DebounceTime); n != 1 || sum != after.Seconds() {
		t.Errorf("pilot_debounce_time count=%d sum=%v, want 1 and %v", n, sum, after.Seconds())
	}

	// The next request starts a new batch of its own.
	d.Enqueue(full(model.ReasonConfigUpdate, "later"))
	clk.Advance(after)
	waitFlushed(t, d, 2)
	hasKeys(t, rec.call(t, 1), key(model.KindVirtualService, "later"))
	if n := rec.count(); n != 2 {
		t.Errorf("out called %d times, want 2", n)
	}
}

func TestQuietPeriodRestartsWithEachRequest(t *testing.T) {
	clk := newManualClock()
	rec := &recorder{}
	d := newWithClock(Options{After: after, Max: 10 * time.Second, EDSDebounce: true}, rec.out, nil, nil, clk)
	start(t, d)

	// Each gap is shorter than After, though the first request is older than After.
	d.Enqueue(full(model.ReasonConfigUpdate, "a"))
	clk.Advance(60 * time.Millisecond)
	d.Enqueue(full(model.ReasonConfigUpdate, "b"))
	clk.Advance(60 * time.Millisecond)
	d.Enqueue(full(model.ReasonConfigUpdate, "c"))
	clk.Advance(after)
	waitFlushed(t, d, 1)
	hasKeys(t, rec.call(t, 0), key(model.KindVirtualService, "a"), key(model.KindVirtualService, "b"), key(model.KindVirtualService, "c"))
}

func TestMaxCapsNeverQuietStream(t *testing.T) {
	clk := newManualClock()
	rec := &recorder{}
	d := newWithClock(Options{After: after, Max: time.Second, EDSDebounce: true}, rec.out, nil, nil, clk)
	start(t, d)

	// 20 requests 50ms apart: never quiet for 100ms; the clock reaches
	// Max (1s after the first) only after the last one.
	var keys []model.ConfigKey
	for i := range 20 {
		d.Enqueue(full(model.ReasonConfigUpdate, fmt.Sprint(i)))
		keys = append(keys, key(model.KindVirtualService, fmt.Sprint(i)))
		clk.Advance(50 * time.Millisecond)
	}
	waitFlushed(t, d, 1)
	got := rec.call(t, 0)
	hasKeys(t, got, keys...)
	if got.Reason[model.ReasonConfigUpdate] != 20 {
		t.Errorf("Reason = %v, want config=20", got.Reason)
	}

	d.Enqueue(full(model.ReasonConfigUpdate, "next"))
	clk.Advance(after)
	waitFlushed(t, d, 2)
	hasKeys(t, rec.call(t, 1), key(model.KindVirtualService, "next"))
}

func TestFullAndEDSMergeToFull(t *testing.T) {
	for _, edsFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("edsFirst=%v", edsFirst), func(t *testing.T) {
			clk := newManualClock()
			rec := &recorder{}
			d := newWithClock(Options{After: after, Max: 10 * time.Second, EDSDebounce: true}, rec.out, nil, nil, clk)
			start(t, d)

			reqs := []*model.PushRequest{eds("reviews"), full(model.ReasonConfigUpdate, "vs")}
			if !edsFirst {
				reqs[0], reqs[1] = reqs[1], reqs[0]
			}
			for _, r := range reqs {
				d.Enqueue(r)
			}
			clk.Advance(after)
			waitFlushed(t, d, 1)
			got := rec.call(t, 0)
			if !got.Full {
				t.Errorf("Full = false, want true")
			}
			hasKeys(t, got, key(model.KindEndpoints, "reviews"), key(model.KindVirtualService, "vs"))
			if got.Reason[model.ReasonEndpointUpdate] != 1 || got.Reason[model.ReasonConfigUpdate] != 1 {
				t.Errorf("Reason = %v, want endpoint=1 config=1", got.Reason)
			}
		})
	}
}

func TestEDSDebounceOffEmitsAtOnce(t *testing.T) {
	clk := newManualClock()
	rec := &recorder{}
	d := newWithClock(Options{After: after, Max: 10 * time.Second, EDSDebounce: false}, rec.out, nil, nil, clk)
	start(t, d)

	d.Enqueue(full(model.ReasonConfigUpdate, "vs"))
	d.Enqueue(eds("reviews"))
	// The clock does not move: only the endpoint change can be emitted.
	waitFlushed(t, d, 1)
	got := rec.call(t, 0)
	if got.Full {
		t.Errorf("first emission Full = true, want an EDS-only push")
	}
	hasKeys(t, got, key(model.KindEndpoints, "reviews"))

	clk.Advance(after)
	waitFlushed(t, d, 2)
	got = rec.call(t, 1)
	if !got.Full {
		t.Errorf("second emission Full = false, want true")
	}
	hasKeys(t, got, key(model.KindVirtualService, "vs"))
}

func TestRequestsMergeWhileOutRuns(t *testing.T) {
	clk := newManualClock()
	rec := &recorder{started: make(chan struct{}, 10), gate: make(chan struct{})}
	d := newWithClock(Options{After: after, Max: 10 * time.Second, EDSDebounce: false}, rec.out, nil, nil, clk)
	start(t, d)

	d.Enqueue(full(model.ReasonConfigUpdate, "a"))
	clk.Advance(after)
	<-rec.started

	// out is busy: these wait, whatever the clock says, and merge.
	d.Enqueue(full(model.ReasonConfigUpdate, "b"))
	d.Enqueue(eds("reviews"))
	d.Enqueue(full(model.ReasonConfigUpdate, "c"))
	clk.Advance(2 * after)
	if n := rec.count(); n != 1 {
		t.Fatalf("out called %d times while busy, want 1", n)
	}
	rec.gate <- struct{}{}
	<-rec.started
	rec.gate <- struct{}{}
	waitFlushed(t, d, 2)

	got := rec.call(t, 1)
	if !got.Full {
		t.Errorf("Full = false, want true")
	}
	hasKeys(t, got, key(model.KindVirtualService, "b"), key(model.KindVirtualService, "c"), key(model.KindEndpoints, "reviews"))
	if m := rec.maxActive.Load(); m != 1 {
		t.Errorf("out ran %d times at once, want 1", m)
	}
}

func TestOutNeverConcurrentUnderLoad(t *testing.T) {
	rec := &recorder{}
	var mu sync.Mutex
	reasons := 0
	out := func(req *model.PushRequest) {
		rec.out(req)
		mu.Lock()
		defer mu.Unlock()
		for _, n := range req.Reason {
			reasons += n
		}
	}
	d := New(Options{After: time.Millisecond, Max: 5 * time.Millisecond, EDSDebounce: false}, out, nil, nil)
	start(t, d)

	const producers, each = 4, 200
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				if i%3 == 0 {
					d.Enqueue(eds(fmt.Sprintf("svc-%d-%d", p, i)))
				} else {
					d.Enqueue(full(model.ReasonConfigUpdate, fmt.Sprintf("vs-%d-%d", p, i)))
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every request emitted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reasons == producers*each
	})
	if m := rec.maxActive.Load(); m != 1 {
		t.Errorf("out ran %d times at once, want 1", m)
	}
	if n := d.Flushed(); n != uint64(rec.count()) {
		t.Errorf("Flushed() = %d, out called %d times", n, rec.count())
	}
}

func TestMissingReasonCountsAsUnknown(t *testing.T) {
	clk := newManualClock()
	rec := &recorder{}
	d := newWithClock(Options{After: after, EDSDebounce: true}, rec.out, nil, nil, clk)
	start(t, d)

	req := &model.PushRequest{Full: true}
	d.Enqueue(req)
	d.Enqueue(nil)
	clk.Advance(after)
	waitFlushed(t, d, 1)
	got := rec.call(t, 0)
	if got.Reason[model.ReasonUnknownTrigger] != 1 || !got.Full || got.ConfigsUpdated != nil {
		t.Errorf("got Full=%v Reason=%v ConfigsUpdated=%v, want a full push for everything with reason unknown=1", got.Full, got.Reason, got.ConfigsUpdated)
	}
	if req.Reason != nil {
		t.Errorf("Enqueue modified the request: Reason = %v", req.Reason)
	}
}

func TestRunReturnsOnCancelWithNoGoroutineLeft(t *testing.T) {
	before := runtime.NumGoroutine()
	clk := newManualClock()
	rec := &recorder{started: make(chan struct{}, 1), gate: make(chan struct{})}
	d := newWithClock(Options{After: after, Max: 10 * time.Second, EDSDebounce: true}, rec.out, nil, nil, clk)
	cancel, done := start(t, d)

	d.Enqueue(full(model.ReasonConfigUpdate, "a"))
	clk.Advance(after)
	<-rec.started
	d.Enqueue(full(model.ReasonConfigUpdate, "pending"))
	cancel()
	select {
	case <-done:
		t.Fatal("Run returned while out was still running")
	default:
	}
	close(rec.gate)
	waitFor(t, "Run to return", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	// Enqueue after Run returned neither blocks nor emits.
	d.Enqueue(full(model.ReasonConfigUpdate, "late"))
	if n := rec.count(); n != 1 {
		t.Errorf("out called %d times, want 1", n)
	}
	waitFor(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}

func TestDefaultOptionsMatchIstio(t *testing.T) {
	// Istio's three, and meshpilot's endpoint-only cap.
	want := Options{After: 100 * time.Millisecond, Max: 10 * time.Second, EDSDebounce: true, EDSMax: 500 * time.Millisecond}
	if got := DefaultOptions(); got != want {
		t.Errorf("DefaultOptions() = %+v, want %+v", got, want)
	}
}

// churn enqueues n endpoint changes 50ms apart from the clock's now,
// advancing the clock past each; names are prefix0, prefix1, ...
func churn(d *Debouncer, clk *manualClock, prefix string, n int) []model.ConfigKey {
	var keys []model.ConfigKey
	for i := range n {
		name := fmt.Sprint(prefix, i)
		d.Enqueue(eds(name))
		keys = append(keys, key(model.KindEndpoints, name))
		clk.Advance(50 * time.Millisecond)
	}
	return keys
}

func TestQuietPeriodCountsFromStart(t *testing.T) {
	clk := newManualClock()
	rec := &recorder{}
	d := newWithClock(Options{After: after, Max: 10 * time.Second, EDSDebounce: true}, rec.out, nil, nil, clk)
	start(t, d)

	// The change happened 80ms before it was enqueued (its source waited
	// for quiet itself): 20ms more of quiet make it due.
	req := full(model.ReasonConfigUpdate, "vs")
	req.Start = clk.Now().Add(-80 * time.Millisecond)
	d.Enqueue(req)
	clk.Advance(20 * time.Millisecond)
	waitFlushed(t, d, 1)
	hasKeys(t, rec.call(t, 0), key(model.KindVirtualService, "vs"))
}

func TestEDSMaxCapsEndpointChurn(t *testing.T) {
	clk := newManualClock()
	rec := &recorder{}
	d := newWithClock(Options{After: after, Max: 10 * time.Second, EDSDebounce: true, EDSMax: 500 * time.Millisecond}, rec.out, nil, nil, clk)
	start(t, d)

	// Changes at 0, 50, ..., 450ms: never quiet, and the clock is now at
	// 500ms, EDSMax after the first.
	first := churn(d, clk, "a", 10)
	waitFlushed(t, d, 1)
	got := rec.call(t, 0)
	if got.Full {
		t.Errorf("Full = true, want an endpoint-only push")
	}
	hasKeys(t, got, first...)

	// The next batch starts with its own first change, at 500ms.
	second := churn(d, clk, "b", 10)
	waitFlushed(t, d, 2)
	hasKeys(t, rec.call(t, 1), second...)
}

func TestEDSMaxZeroWaitsForMaxAsIstio(t *testing.T) {
	clk := newManualClock()
	rec := &recorder{}
	d := newWithClock(Options{After: after, Max: time.Second, EDSDebounce: true}, rec.out, nil, nil, clk)
	start(t, d)

	// 20 changes 50ms apart end at 950ms, before Max: one push carries all.
	keys := churn(d, clk, "a", 20)
	waitFlushed(t, d, 1)
	hasKeys(t, rec.call(t, 0), keys...)
}

func TestFullPushNotHeldBackByEndpointChurn(t *testing.T) {
	clk := newManualClock()
	rec := &recorder{}
	d := newWithClock(Options{After: after, Max: 10 * time.Second, EDSDebounce: true, EDSMax: time.Second}, rec.out, nil, nil, clk)
	start(t, d)

	// The full change is quiet for After at 100ms, while endpoints keep
	// changing; it goes out then and carries the endpoint changes so far.
	d.Enqueue(full(model.ReasonConfigUpdate, "vs"))
	keys := churn(d, clk, "a", 2)
	waitFlushed(t, d, 1)
	got := rec.call(t, 0)
	if !got.Full {
		t.Errorf("Full = false, want true")
	}
	hasKeys(t, got, append(keys, key(model.KindVirtualService, "vs"))...)
}

// histogram returns the sample count and sum of h.
func histogram(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatalf("read histogram: %v", err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// counter returns the value of c.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatalf("read counter: %v", err)
	}
	return m.GetCounter().GetValue()
}
