// Package testutil holds the small helpers many packages' tests share: a
// log buffer safe for concurrent writers, one sample read from a Prometheus
// /metrics page, and polling for a condition with a deadline.
package testutil

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// pollInterval is how often Eventually checks its condition.
const pollInterval = 20 * time.Millisecond

// Buffer is a bytes.Buffer safe for concurrent Write and String (logs from
// goroutines, a process's output). The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Metric returns the value of the sample named exactly series ("name" or
// `name{a="b",c="d"}` with labels sorted, as the text format prints them)
// from the Prometheus text page at url; ok=false when absent. Fails t on
// HTTP errors, a status other than 200, or a value that is not a number.
func Metric(t testing.TB, url, series string) (float64, bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatalf("metric %s: %v", series, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("metric %s: GET %s: %v", series, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("metric %s: read %s: %v", series, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metric %s: GET %s: %s: %.200s", series, url, resp.Status, body)
	}
	for _, line := range strings.Split(string(body), "\n") {
		name, value, ok := splitSample(line)
		if !ok || name != series {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric %s at %s: value %q: %v", series, url, value, err)
		}
		return v, true
	}
	return 0, false
}

// splitSample splits a text-format sample line into its series (name and
// label set, as printed) and value; comments and blank lines are not samples.
// Label values may hold spaces, so a label set ends at the line's last '}'.
func splitSample(line string) (series, value string, ok bool) {
	if line == "" || line[0] == '#' {
		return "", "", false
	}
	end := strings.IndexByte(line, ' ')
	if open := strings.IndexByte(line, '{'); open >= 0 && (end < 0 || open < end) {
		end = strings.LastIndexByte(line, '}') + 1
	}
	if end <= 0 {
		return "", "", false
	}
	rest := strings.Fields(line[end:]) // value, then an optional timestamp
	if len(rest) == 0 {
		return "", "", false
	}
	return line[:end], rest[0], true
}

// Eventually polls cond every 20ms until it holds, failing t with what after d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(d, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// EventuallyNoError polls cond every 20ms until it returns nil, failing t
// with what and cond's last error after d.
func EventuallyNoError(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	var last error
	if !poll(d, func() error { last = cond(); return last }) {
		t.Fatalf("timed out after %v waiting for %s: %v", d, what, last)
	}
}

// errNotYet is Eventually's condition not holding.
var errNotYet = errors.New("not yet")

// poll calls cond every pollInterval until it returns nil (true) or d has
// passed (false); cond is called at least once.
func poll(d time.Duration, cond func() error) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for cond() != nil {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
