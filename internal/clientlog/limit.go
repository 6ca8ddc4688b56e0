package clientlog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults of Limit.
const (
	DefaultBurst  = 5
	DefaultWindow = time.Minute
	// maxEvents bounds the distinct events a Limiter tracks; messages are
	// the code's constants, so this is never reached in practice, and
	// beyond it every new message shares one count.
	maxEvents = 64
	// otherEvents is the shared count past maxEvents.
	otherEvents = "(other events)"
)

// SuppressedMessage is the message of the line that reports suppressed
// records.
const SuppressedMessage = "repeated log lines suppressed"

// Limit configures a Limiter. Zero fields take the defaults.
type Limit struct {
	// Burst is how many records of one event are written per window.
	Burst int
	// Window is the length of a rate-limiting window.
	Window time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Limiter rate-limits the log records of one connection: per event (the
// record's message), the first Burst records of each Window are written
// and the rest counted; the next record of that event after the window,
// or Flush, writes one line saying how many were suppressed. Create one per
// connection with NewLimiter and log through Logger; it is safe for
// concurrent use.
type Limiter struct {
	burst  int
	window time.Duration
	now    func() time.Time

	mu     sync.Mutex
	events map[string]*eventCount
}

// eventCount is the state of one event in the current window.
type eventCount struct {
	start      time.Time
	written    int
	suppressed int
	level      slog.Level
	// out is the handler a suppressed record would have gone to; the
	// summary goes there (with the same connection attributes).
	out slog.Handler
}

// NewLimiter returns a Limiter configured by l.
func NewLimiter(l Limit) *Limiter {
	if l.Burst <= 0 {
		l.Burst = DefaultBurst
	}
	if l.Window <= 0 {
		l.Window = DefaultWindow
	}
	if l.Now == nil {
		l.Now = time.Now
	}
	return &Limiter{burst: l.Burst, window: l.Window, now: l.Now, events: map[string]*eventCount{}}
}

// Logger returns log with its records passing through the limiter.
func (l *Limiter) Logger(log *slog.Logger) *slog.Logger {
	return slog.New(&limitHandler{inner: log.Handler(), l: l})
}

// Limited returns a logger that rate-limits log's records with a new
// Limiter of the default Limit: one per connection.
func Limited(log *slog.Logger) *slog.Logger { return NewLimiter(Limit{}).Logger(log) }

// Flush writes the summary of every event suppressed in its current window
// and forgets them; call it when the connection ends. It does nothing for a
// logger that does not come from a Limiter.
func Flush(ctx context.Context, log *slog.Logger) {
	if h, ok := log.Handler().(*limitHandler); ok {
		h.l.flush(ctx)
	}
}

func (l *Limiter) flush(ctx context.Context) {
	l.mu.Lock()
	var pending []summary
	for event, c := range l.events {
		if c.suppressed > 0 {
			pending = append(pending, summary{event: event, count: *c})
		}
		delete(l.events, event)
	}
	l.mu.Unlock()
	for _, s := range pending {
		l.writeSummary(ctx, s)
	}
}

type summary struct {
	event string
	count eventCount
}

// admit decides whether r, about to go to out, is written. A window that
// ended with records suppressed is returned for its summary line.
func (l *Limiter) admit(r slog.Record, out slog.Handler) (write bool, ended *summary) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	event := r.Message
	c := l.events[event]
	if c == nil {
		if len(l.events) >= maxEvents {
			event = otherEvents
			c = l.events[event]
		}
		if c == nil {
			c = &eventCount{start: now}
			l.events[event] = c
		}
	}
	if now.Sub(c.start) >= l.window {
		if c.suppressed > 0 {
			ended = &summary{event: event, count: *c}
		}
		*c = eventCount{start: now}
	}
	if c.written < l.burst {
		c.written++
		return true, ended
	}
	if c.suppressed == 0 || r.Level > c.level {
		c.level = r.Level
	}
	c.suppressed++
	c.out = out
	return false, ended
}

func (l *Limiter) writeSummary(ctx context.Context, s summary) {
	if !s.count.out.Enabled(ctx, s.count.level) {
		return
	}
	r := slog.NewRecord(l.now(), s.count.level, SuppressedMessage, 0)
	r.AddAttrs(slog.String("event", s.event), slog.Int("suppressed", s.count.suppressed),
		slog.Duration("window", l.window), slog.Time("since", s.count.start))
	_ = s.count.out.Handle(ctx, r)
}

// limitHandler passes records through its Limiter to inner.
type limitHandler struct {
	inner slog.Handler
	l     *Limiter
}

func (h *limitHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *limitHandler) Handle(ctx context.Context, r slog.Record) error {
	write, ended := h.l.admit(r, h.inner)
	if ended != nil {
		h.l.writeSummary(ctx, *ended)
	}
	if !write {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *limitHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &limitHandler{inner: h.inner.WithAttrs(attrs), l: h.l}
}

func (h *limitHandler) WithGroup(name string) slog.Handler {
	return &limitHandler{inner: h.inner.WithGroup(name), l: h.l}
}
