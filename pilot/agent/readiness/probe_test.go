package readiness

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
)

// run starts p and returns its reports; it stops when the test ends.
func run(t *testing.T, p *networking.ReadinessProbe) <-chan Report {
	t.Helper()
	reports := make(chan Report, 16)
	pr, err := New(p, func(r Report) { reports <- r }, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); pr.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return reports
}

func next(t *testing.T, reports <-chan Report) Report {
	t.Helper()
	select {
	case r := <-reports:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no report within 10 s")
	}
	return Report{}
}

// TestHTTPProbe: healthy on 2xx, unhealthy (with the status) after
// failureThreshold failures, each change reported once; the request
// carries the probe's headers.
func TestHTTPProbe(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	var header atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header.Store(r.Header.Get("X-Probe") + " " + r.URL.Path)
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	portN, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	reports := run(t, &networking.ReadinessProbe{PeriodSeconds: 1, FailureThreshold: 2,
		HealthCheckMethod: &networking.ReadinessProbe_HttpGet{HttpGet: &networking.HTTPHealthCheckConfig{
			Host: host, Port: uint32(portN), Path: "ready", HttpHeaders: []*networking.HTTPHeader{{Name: "X-Probe", Value: "vm"}},
		}}})
	if r := next(t, reports); !r.Healthy {
		t.Fatalf("first report %+v, want healthy", r)
	}
	if got := header.Load(); got != "vm /ready" {
		t.Fatalf("request %q, want the probe's header and path", got)
	}
	status.Store(http.StatusServiceUnavailable)
	if r := next(t, reports); r.Healthy || !strings.Contains(r.Message, "503") {
		t.Fatalf("report %+v, want unhealthy with the status", r)
	}
	status.Store(http.StatusOK)
	if r := next(t, reports); !r.Healthy {
		t.Fatalf("report %+v, want healthy again", r)
	}
}

// TestTCPAndExecProbes: a TCP probe follows the listener; an exec probe
// the command's exit status.
func TestTCPAndExecProbes(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint32(lis.Addr().(*net.TCPAddr).Port)
	reports := run(t, &networking.ReadinessProbe{PeriodSeconds: 1, FailureThreshold: 1,
		HealthCheckMethod: &networking.ReadinessProbe_TcpSocket{TcpSocket: &networking.TCPHealthCheckConfig{Host: "127.0.0.1", Port: port}}})
	if r := next(t, reports); !r.Healthy {
		t.Fatalf("TCP: %+v, want healthy", r)
	}
	lis.Close()
	if r := next(t, reports); r.Healthy {
		t.Fatalf("TCP after close: %+v, want unhealthy", r)
	}

	failing := run(t, &networking.ReadinessProbe{PeriodSeconds: 1, FailureThreshold: 1,
		HealthCheckMethod: &networking.ReadinessProbe_Exec{Exec: &networking.ExecHealthCheckConfig{Command: []string{"false"}}}})
	if r := next(t, failing); r.Healthy || !strings.Contains(r.Message, "false") {
		t.Fatalf("exec false: %+v, want unhealthy", r)
	}
	if _, err := New(&networking.ReadinessProbe{}, func(Report) {}, nil); err == nil {
		t.Fatal("a probe without a method was accepted")
	}
}
