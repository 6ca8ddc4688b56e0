// Package debounce merges bursts of push requests into fewer pushes, with
// istiod's semantics (PILOT_DEBOUNCE_AFTER, PILOT_DEBOUNCE_MAX,
// PILOT_ENABLE_EDS_DEBOUNCE). One goroutine, Run, does all the debouncing;
// the merged request goes to an output function that is never called twice
// at once.
package debounce

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/monitoring"
)

// Options configures a Debouncer.
type Options struct {
	// After is the quiet period: a batch is emitted once no request arrived
	// for this long (PILOT_DEBOUNCE_AFTER, Istio default 100ms). Zero emits
	// as soon as the output is free.
	After time.Duration
	// Max caps the wait since the first request of a batch
	// (PILOT_DEBOUNCE_MAX, Istio default 10s). Zero means no cap.
	Max time.Duration
	// EDSDebounce debounces endpoint-only requests too. When false, they
	// are emitted at once (PILOT_ENABLE_EDS_DEBOUNCE, Istio default true).
	EDSDebounce bool
	// EDSMax caps the wait of an endpoint-only batch when it is shorter
	// than Max (MESHPILOT_EDS_DEBOUNCE_MAX, default DefaultEDSMax); zero
	// leaves it Max, as istiod.
	//
	// This is a deliberate deviation from istiod. There, endpoint changes
	// share the full batch, and under steady churn (a rolling restart of
	// a large Deployment, ~16 pod events a second) the 100ms quiet period
	// never comes, so every endpoint waits for PILOT_DEBOUNCE_MAX (10s)
	// while proxies keep sending traffic to terminated pods (istio#44985).
	// An endpoint-only push regenerates only the changed clusters'
	// assignments, so pushing it sooner costs little; full pushes keep
	// Istio's cap. Endpoint-only requests therefore batch apart, and a
	// full batch's quiet period counts full requests only (in istiod an
	// endpoint event restarts it too).
	EDSMax time.Duration
}

// DefaultEDSMax is the default Options.EDSMax.
const DefaultEDSMax = 500 * time.Millisecond

// DefaultOptions returns Istio's defaults, plus meshpilot's EDSMax.
func DefaultOptions() Options {
	return Options{After: 100 * time.Millisecond, Max: 10 * time.Second, EDSDebounce: true, EDSMax: DefaultEDSMax}
}

// edsOptions is when an endpoint-only batch is due: at once without EDS
// debounce, else as a full batch but capped by EDSMax.
func (o Options) edsOptions() Options {
	if !o.EDSDebounce {
		return Options{}
	}
	eds := o
	if o.EDSMax > 0 && (o.Max == 0 || o.EDSMax < o.Max) {
		eds.Max = o.EDSMax
	}
	return eds
}

// Debouncer merges push requests (model.PushRequest.Merge) and hands the
// merged request to its output once the stream is quiet for After or Max
// passed since the batch's first request. Endpoint-only requests batch
// apart, capped by EDSMax; a full batch takes them along when it is
// emitted. While the output runs, new requests keep merging; they are
// emitted after it returns.
type Debouncer struct {
	opts    Options
	out     func(*model.PushRequest)
	metrics *monitoring.Metrics
	log     *slog.Logger
	clock   clock

	mu      sync.Mutex
	inbox   []arrival
	stopped bool
	// wake holds a token when the inbox may have grown.
	wake chan struct{}

	flushed atomic.Uint64
}

// New returns a Debouncer that calls out with merged requests once Run is
// running. m and log may be nil.
func New(opts Options, out func(*model.PushRequest), m *monitoring.Metrics, log *slog.Logger) *Debouncer {
	return newWithClock(opts, out, m, log, wallClock{})
}

func newWithClock(opts Options, out func(*model.PushRequest), m *monitoring.Metrics, log *slog.Logger, c clock) *Debouncer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Debouncer{opts: opts, out: out, metrics: m, log: log, clock: c, wake: make(chan struct{}, 1)}
}

// Enqueue adds a request to the next batch. It never blocks. A request
// without a reason counts as ReasonUnknownTrigger; nil requests and
// requests after Run returned are dropped. req is not modified.
//
// The request arrives at req.Start when that is set and earlier than now:
// the quiet period counts from when the change happened, so a source that
// already waited for quiet (the config directory watcher) is not made to
// wait twice.
func (d *Debouncer) Enqueue(req *model.PushRequest) {
	if req == nil {
		return
	}
	if len(req.Reason) == 0 {
		unknown := &model.PushRequest{Reason: map[model.TriggerReason]int{model.ReasonUnknownTrigger: 1}}
		req = unknown.Merge(req)
	}
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return
	}
	at := d.clock.Now()
	if !req.Start.IsZero() && req.Start.Before(at) {
		at = req.Start
	}
	d.inbox = append(d.inbox, arrival{req: req, at: at})
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Flushed returns how many merged requests out has finished handling.
func (d *Debouncer) Flushed() uint64 { return d.flushed.Load() }

// take empties the inbox.
func (d *Debouncer) take() []arrival {
	d.mu.Lock()
	defer d.mu.Unlock()
	in := d.inbox
	d.inbox = nil
	return in
}

// Run debounces until ctx is done. If out is running then, Run waits for
// it to return, so no goroutine outlives Run. Pending requests are dropped.
func (d *Debouncer) Run(ctx context.Context) {
	var (
		debounced, eds batch
		busy           bool
		outDone        = make(chan struct{}, 1)
		timerC         <-chan time.Time
		stopTimer      = func() {}
		edsOpts        = d.opts.edsOptions()
	)
	defer func() {
		stopTimer()
		d.mu.Lock()
		d.stopped = true
		d.inbox = nil
		d.mu.Unlock()
		if busy {
			<-outDone
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-outDone:
			busy = false
		case <-timerC:
			timerC = nil
		}
		// Read the time before draining: everything enqueued before now is
		// then in this batch, so quiet periods are never overestimated.
		now := d.clock.Now()
		for _, a := range d.take() {
			if a.req.Full {
				debounced.add(a)
			} else {
				eds.add(a)
			}
		}
		if busy {
			continue
		}
		fullReady, fullAt := debounced.due(now, d.opts)
		edsReady, edsAt := eds.due(now, edsOpts)
		var emit batch
		switch {
		case fullReady:
			// A full push also carries any pending endpoint changes.
			emit = debounced
			emit.join(eds)
			debounced, eds = batch{}, batch{}
		case edsReady:
			emit = eds
			eds = batch{}
		}
		stopTimer()
		timerC, stopTimer = nil, func() {}
		if !emit.empty() {
			busy = true
			d.emit(emit, now, outDone)
			continue
		}
		if next, ok := earliest(debounced, fullAt, eds, edsAt); ok {
			timerC, stopTimer = d.clock.At(next)
		}
	}
}

// earliest returns the sooner deadline of the non-empty batches, and false
// when both are empty.
func earliest(a batch, aAt time.Time, b batch, bAt time.Time) (time.Time, bool) {
	switch {
	case a.empty() && b.empty():
		return time.Time{}, false
	case a.empty():
		return bAt, true
	case b.empty() || aAt.Before(bAt):
		return aAt, true
	}
	return bAt, true
}

// emit records metrics, logs and starts out on its own goroutine; outDone
// receives when it returns.
func (d *Debouncer) emit(b batch, now time.Time, outDone chan<- struct{}) {
	req := b.req
	if d.metrics != nil {
		d.metrics.DebounceTime.Observe(now.Sub(b.first).Seconds())
		for reason, n := range req.Reason {
			d.metrics.PushTriggers.WithLabelValues(string(reason)).Add(float64(n))
		}
	}
	d.log.Debug("push debounce stable",
		"events", b.events,
		"full", req.Full,
		"reasons", reasonList(req.Reason),
		"configs", len(req.ConfigsUpdated),
		"quiet", now.Sub(b.last),
		"sinceFirst", now.Sub(b.first))
	go func() {
		d.out(req)
		d.flushed.Add(1)
		outDone <- struct{}{}
	}()
}

// reasonList renders reason counts in a stable order for logs.
func reasonList(r map[model.TriggerReason]int) []string {
	keys := slices.Sorted(maps.Keys(r))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, string(k)+"="+strconv.Itoa(r[k]))
	}
	return out
}
