package clientlog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		out = append(out, m)
	}
	return out
}

func TestLimiterSuppressesRepeatsAndSummarises(t *testing.T) {
	var buf bytes.Buffer
	clk := &clock{now: time.Unix(1000, 0)}
	base := slog.New(slog.NewJSONHandler(&buf, nil)).With("conn", "pod.ns-1")
	log := NewLimiter(Limit{Burst: 3, Window: time.Minute, Now: clk.Now}).Logger(base)

	for range 20 {
		log.Warn("proxy rejected config (NACK)", "type", "cds")
	}
	log.Info("other event") // its own count
	got := lines(t, &buf)
	if len(got) != 4 {
		t.Fatalf("got %d lines in the window, want 3 NACKs and 1 other:\n%s", len(got), buf.String())
	}
	buf.Reset()

	// The window ends: the next NACK is written after a summary of the 17.
	clk.advance(time.Minute)
	log.Warn("proxy rejected config (NACK)", "type", "lds")
	got = lines(t, &buf)
	if len(got) != 2 || got[0]["msg"] != SuppressedMessage || got[0]["suppressed"] != float64(17) ||
		got[0]["event"] != "proxy rejected config (NACK)" || got[0]["conn"] != "pod.ns-1" || got[0]["level"] != "WARN" {
		t.Fatalf("after the window:\n%s", buf.String())
	}
	if got[1]["type"] != "lds" {
		t.Errorf("second line = %v", got[1])
	}
	buf.Reset()

	// Suppressed again, then the connection ends: Flush reports them.
	for range 5 {
		log.Warn("proxy rejected config (NACK)")
	}
	buf.Reset()
	Flush(t.Context(), log.With("more", "attrs"))
	got = lines(t, &buf)
	if len(got) != 1 || got[0]["suppressed"] != float64(3) || got[0]["conn"] != "pod.ns-1" {
		t.Fatalf("flush:\n%s", buf.String())
	}
	buf.Reset()
	Flush(t.Context(), log)
	if buf.Len() != 0 {
		t.Errorf("second flush wrote %s", buf.String())
	}
}

func TestLimiterIsPerConnection(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewJSONHandler(&buf, nil))
	a, b := Limited(base.With("conn", "a")), Limited(base.With("conn", "b"))
	for range 2 * DefaultBurst {
		a.Warn("nack")
		b.Warn("nack")
	}
	counts := map[any]int{}
	for _, l := range lines(t, &buf) {
		counts[l["conn"]]++
	}
	if counts["a"] != DefaultBurst || counts["b"] != DefaultBurst {
		t.Errorf("lines per connection = %v, want %d each", counts, DefaultBurst)
	}
}

func TestLimiterBoundsDistinctEvents(t *testing.T) {
	var buf bytes.Buffer
	l := NewLimiter(Limit{Burst: 1})
	log := l.Logger(slog.New(slog.NewJSONHandler(&buf, nil)))
	for i := range 1000 {
		log.Warn("event " + strings.Repeat("x", i%500) + string(rune('a'+i%26)))
	}
	if n := len(l.events); n > maxEvents+1 {
		t.Errorf("%d events tracked, want at most %d", n, maxEvents+1)
	}
	if n := len(lines(t, &buf)); n > maxEvents+1 {
		t.Errorf("%d lines written, want at most %d", n, maxEvents+1)
	}
}

func TestFlushIgnoresPlainLoggers(t *testing.T) {
	var buf bytes.Buffer
	Flush(t.Context(), slog.New(slog.NewJSONHandler(&buf, nil)))
	if buf.Len() != 0 {
		t.Errorf("wrote %s", buf.String())
	}
}
