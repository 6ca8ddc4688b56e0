package health

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/httpserve"
	"github.com/meshpilot/meshpilot/internal/httpserve/httpservetest"
)

// bound is how long a test waits for what must happen; generous for a
// loaded machine under -race.
const bound = 10 * time.Second

// idleConn makes one keep-alive request on a new connection and leaves it
// open and idle, as a scraper between scrapes.
func idleConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(bound))
	if _, err := io.WriteString(c, "GET "+ReadyPath+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c
}

func TestIdleConnectionsCannotStarveProbe(t *testing.T) {
	t.Parallel()
	const maxConns, idle = 3, 12
	base := start(t, Options{Limits: httpserve.Limits{MaxConns: maxConns, IdleTimeout: time.Hour}})
	addr := strings.TrimPrefix(base, "http://")
	conns := make([]net.Conn, idle)
	for i := range conns {
		conns[i] = idleConn(t, addr)
	}
	probe := &http.Client{Timeout: bound, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := probe.Get(base + ReadyPath)
	if err != nil {
		t.Fatalf("readiness probe with %d idle connections and a cap of %d: %v", idle, maxConns, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readiness probe: status %d", resp.StatusCode)
	}
	if n := httpservetest.CountClosed(conns, idle-maxConns, bound); n < idle-maxConns {
		t.Errorf("%d of %d idle connections closed by the server, want at least %d (cap %d)", n, idle, idle-maxConns, maxConns)
	}
}

func TestIdleConnectionClosedAfterIdleTimeout(t *testing.T) {
	t.Parallel()
	base := start(t, Options{Limits: httpserve.Limits{IdleTimeout: 50 * time.Millisecond}})
	c := idleConn(t, strings.TrimPrefix(base, "http://"))
	if !httpservetest.ClosedByServer(c, bound) {
		t.Fatalf("idle connection still open %v after a 50ms idle timeout", bound)
	}
}
