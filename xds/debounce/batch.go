package debounce

import (
	"time"

	"github.com/meshpilot/meshpilot/model"
)

// arrival is one enqueued request and when it was enqueued.
type arrival struct {
	req *model.PushRequest
	at  time.Time
}

// batch accumulates merged requests until they are emitted.
type batch struct {
	req    *model.PushRequest
	events int
	// first and last are the arrival times of the oldest and newest request.
	first, last time.Time
}

// add merges a into the batch.
func (b *batch) add(a arrival) {
	if b.events == 0 || a.at.Before(b.first) {
		b.first = a.at
	}
	if b.events == 0 || a.at.After(b.last) {
		b.last = a.at
	}
	b.events++
	b.req = b.req.Merge(a.req)
}

// join merges the whole of o into the batch.
func (b *batch) join(o batch) {
	if o.events == 0 {
		return
	}
	b.add(arrival{req: o.req, at: o.first})
	b.events += o.events - 1
	if o.last.After(b.last) {
		b.last = o.last
	}
}

// empty reports whether nothing is pending.
func (b *batch) empty() bool { return b.events == 0 }

// due returns whether the batch should be emitted at now and, if not, the
// time at which it will be: the end of the quiet period After, capped by
// Max since the first request. Zero After makes a batch due at once; zero
// Max means no cap.
func (b *batch) due(now time.Time, opts Options) (bool, time.Time) {
	if b.empty() {
		return false, time.Time{}
	}
	deadline := b.last.Add(opts.After)
	if opts.Max > 0 {
		if capAt := b.first.Add(opts.Max); capAt.Before(deadline) {
			deadline = capAt
		}
	}
	return !now.Before(deadline), deadline
}
