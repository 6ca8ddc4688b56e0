package httpserve

import (
	"bufio"
	"errors"
	"github.com/meshpilot/meshpilot/internal/httpserve/httpservetest"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// bound is how long a test waits for what must happen; generous for a
// loaded machine under -race.
const bound = 10 * time.Second

func start(t *testing.T, h http.Handler, l Limits) (*Server, string) {
	t.Helper()
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	}
	srv := New("test", h, l, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, lis.Addr().String()
}

// keepAlive opens a connection, makes one request on it and leaves it
// open and idle, as a keep-alive client does.
func keepAlive(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(bound))
	if _, err := io.WriteString(c, "GET /ready HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("keep-alive request: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("keep-alive request: status %d, close %v", resp.StatusCode, resp.Close)
	}
	return c
}

func TestIdleKeepAlivesCannotStarveNewClient(t *testing.T) {
	t.Parallel()
	const maxConns, idle = 4, 20
	srv, addr := start(t, nil, Limits{MaxConns: maxConns, IdleTimeout: time.Hour})
	conns := make([]net.Conn, idle)
	for i := range conns {
		conns[i] = keepAlive(t, addr)
	}
	// A new client, e.g. the kubelet probing /ready, is served at once.
	client := &http.Client{Timeout: bound, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/ready")
	if err != nil {
		t.Fatalf("/ready with %d idle keep-alives open and a cap of %d: %v", idle, maxConns, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/ready: status %d", resp.StatusCode)
	}
	// Idle connections made room: at most maxConns of them stay open.
	// Which ones is timing (a connection counts as idle only once the
	// server has finished its answer), so only their number is checked.
	if n := httpservetest.CountClosed(conns, idle-maxConns, bound); n < idle-maxConns {
		t.Errorf("%d of %d idle connections closed by the server, want at least %d (cap %d)", n, idle, idle-maxConns, maxConns)
	}
	if open := srv.Open(); open > maxConns {
		t.Errorf("%d connections open, cap %d", open, maxConns)
	}
}

func TestIdleTimeoutClosesKeepAlive(t *testing.T) {
	t.Parallel()
	_, addr := start(t, nil, Limits{IdleTimeout: 50 * time.Millisecond})
	c := keepAlive(t, addr)
	if !httpservetest.ClosedByServer(c, bound) {
		t.Fatalf("idle keep-alive still open %v after a 50ms idle timeout", bound)
	}
}

func TestSilentConnectionClosedAfterReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	_, addr := start(t, nil, Limits{ReadHeaderTimeout: 50 * time.Millisecond})
	c, err := net.DialTimeout("tcp", addr, bound)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !httpservetest.ClosedByServer(c, bound) {
		t.Fatalf("connection that sends nothing still open %v after a 50ms header timeout", bound)
	}
}

func TestBusyConnectionsAreNotClosed(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	srv, addr := start(t, h, Limits{MaxConns: 1})
	client := &http.Client{Timeout: bound, Transport: &http.Transport{DisableKeepAlives: true}}
	slow := make(chan error, 1)
	go func() {
		resp, err := client.Get("http://" + addr + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		slow <- err
	}()
	<-entered
	// At the cap with the only connection busy, a newcomer waits for it
	// rather than cutting it off.
	fast := make(chan error, 1)
	go func() {
		resp, err := client.Get("http://" + addr + "/fast")
		if err == nil {
			resp.Body.Close()
		}
		fast <- err
	}()
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("busy request cut off by a newcomer: %v", err)
	}
	if err := <-fast; err != nil {
		t.Fatalf("newcomer not served once the busy connection ended: %v", err)
	}
	if open := srv.Open(); open > 1 {
		t.Errorf("%d connections open, cap 1", open)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	srv := New("test", http.NotFoundHandler(), Limits{WriteTimeout: -1}, nil)
	if srv.ReadHeaderTimeout != DefaultReadHeaderTimeout || srv.ReadTimeout != DefaultReadTimeout ||
		srv.IdleTimeout != DefaultIdleTimeout || srv.MaxHeaderBytes != DefaultMaxHeaderBytes || srv.WriteTimeout != 0 {
		t.Errorf("server limits %v %v %v %v %v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	if l := (Limits{}).WithDefaults(); l.MaxConns != DefaultMaxConns || l.WriteTimeout != DefaultWriteTimeout {
		t.Errorf("defaults %+v", l)
	}
}
