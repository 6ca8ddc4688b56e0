package testutil

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// calling goroutine, as the real one does, without failing the outer test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatal runs f with a recorder in its own goroutine and returns the message
// f failed with ("" when it did not fail).
func fatal(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}

func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&b, "%d\n", i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 {
		t.Errorf("%d lines, want 800", n)
	}
}

const page = `# HELP pilot_xds_pushes Pilot build and send errors.
# TYPE pilot_xds_pushes counter
pilot_xds_pushes{type="cds"} 3
pilot_xds_pushes{type="eds"} 12
meshpilot_config_errors 0
envoy_server_live{} 1
odd{msg="a } b",z="y y"} 2.5 1700000000000
nan_metric NaN
bad_value abc
`

func metricsServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, page)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestMetric(t *testing.T) {
	url := metricsServer(t) + "/metrics"
	for _, tc := range []struct {
		series string
		want   float64
		ok     bool
	}{
		{`pilot_xds_pushes{type="eds"}`, 12, true},
		{`pilot_xds_pushes{type="cds"}`, 3, true},
		{"meshpilot_config_errors", 0, true},
		{"envoy_server_live{}", 1, true},
		{`odd{msg="a } b",z="y y"}`, 2.5, true},
		{"pilot_xds_pushes", 0, false},             // only labelled samples
		{`pilot_xds_pushes{type="lds"}`, 0, false}, // absent
		{"envoy_server_live", 0, false},            // printed with {}
		{"meshpilot_config", 0, false},             // a prefix is not the name
	} {
		got, ok := Metric(t, url, tc.series)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Metric(%s) = %v, %v; want %v, %v", tc.series, got, ok, tc.want, tc.ok)
		}
	}
	if v, ok := Metric(t, url, "nan_metric"); !ok || !math.IsNaN(v) {
		t.Errorf("Metric(nan_metric) = %v, %v; want NaN, true", v, ok)
	}
}

func TestMetricFails(t *testing.T) {
	base := metricsServer(t)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		name, url, series, want string
	}{
		{"not a number", base + "/metrics", "bad_value", `value "abc"`},
		{"status 404", base + "/other", "x", "404 Not Found"},
		{"nothing listening", closed.URL + "/metrics", "x", "GET " + closed.URL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := fatal(t, func(tb testing.TB) { Metric(tb, tc.url, tc.series) })
			if !strings.Contains(msg, tc.want) {
				t.Errorf("failure %q, want it to contain %q", msg, tc.want)
			}
		})
	}
}

func TestEventually(t *testing.T) {
	var calls atomic.Int32
	msg := fatal(t, func(tb testing.TB) {
		Eventually(tb, time.Minute, "three calls", func() bool { return calls.Add(1) == 3 })
	})
	if msg != "" || calls.Load() != 3 {
		t.Errorf("Eventually failed %q after %d calls, want success on the third", msg, calls.Load())
	}

	calls.Store(0)
	msg = fatal(t, func(tb testing.TB) {
		Eventually(tb, 50*time.Millisecond, "never", func() bool { calls.Add(1); return false })
	})
	if want := "timed out after 50ms waiting for never"; msg != want {
		t.Errorf("failure %q, want %q", msg, want)
	}
	if calls.Load() < 2 {
		t.Errorf("cond called %d times before giving up, want it polled", calls.Load())
	}
}

func TestEventuallyNoError(t *testing.T) {
	var calls atomic.Int32
	msg := fatal(t, func(tb testing.TB) {
		EventuallyNoError(tb, time.Minute, "three calls", func() error {
			if calls.Add(1) < 3 {
				return errors.New("not yet")
			}
			return nil
		})
	})
	if msg != "" || calls.Load() != 3 {
		t.Errorf("EventuallyNoError failed %q after %d calls, want success on the third", msg, calls.Load())
	}

	calls.Store(0)
	msg = fatal(t, func(tb testing.TB) {
		EventuallyNoError(tb, 50*time.Millisecond, "never", func() error {
			return fmt.Errorf("attempt %d refused", calls.Add(1))
		})
	})
	if want := fmt.Sprintf("timed out after 50ms waiting for never: attempt %d refused", calls.Load()); msg != want {
		t.Errorf("failure %q, want %q (the last error)", msg, want)
	}
}

func TestFreePortsOutsideEphemeralRange(t *testing.T) {
	ps, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	low := ephemeralLow()
	for _, p := range ps {
		if seen[p] {
			t.Errorf("port %d twice in %v", p, ps)
		}
		seen[p] = true
		if low > 11000 && p >= low {
			t.Errorf("port %d in the ephemeral range (from %d)", p, low)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d not free: %v", p, err)
			continue
		}
		l.Close()
	}
}
