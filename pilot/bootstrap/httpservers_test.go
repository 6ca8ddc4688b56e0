package bootstrap_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/httpserve"
	"github.com/meshpilot/meshpilot/internal/httpserve/httpservetest"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// TestHTTPServersCapIdleConnections: idle keep-alives beyond the cap on
// --httpAddr, --monitoringAddr and --debugAddr are closed, and /ready (on
// --httpAddr) is still answered (issue 32: 20,000 idle connections took
// every descriptor and /ready timed out).
func TestHTTPServersCapIdleConnections(t *testing.T) {
	t.Parallel()
	const maxConns, idle = 3, 10
	const bound = 10 * time.Second
	opts := bootstraptest.Options(t)
	opts.ConfigDir = t.TempDir()
	opts.DebugAddr = "127.0.0.1:0"
	opts.HTTPLimits = httpserve.Limits{MaxConns: maxConns, IdleTimeout: time.Hour}
	srv := bootstraptest.Start(t, opts)
	for _, server := range []struct{ name, addr, path string }{
		{"--httpAddr", srv.HTTPListenAddr(), "/ready"},
		{"--monitoringAddr", srv.MonitoringListenAddr(), "/metrics"},
		{"--debugAddr", srv.DebugListenAddr(), "/debug/syncz"},
	} {
		var conns []net.Conn
		for range idle {
			c, err := net.DialTimeout("tcp", server.addr, bound)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(bound))
			if _, err := io.WriteString(c, "GET "+server.path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("%s: %v", server.name, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			conns = append(conns, c)
		}
		probe := &http.Client{Timeout: bound, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := probe.Get("http://" + server.addr + server.path)
		if err != nil {
			t.Fatalf("%s: new client with %d idle connections open: %v", server.name, idle, err)
		}
		resp.Body.Close()
		if n := httpservetest.CountClosed(conns, idle-maxConns, bound); n < idle-maxConns {
			t.Errorf("%s: %d of %d idle connections closed by the server, want at least %d (cap %d)", server.name, n, idle, idle-maxConns, maxConns)
		}
	}
}
