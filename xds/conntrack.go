package xds

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/peer"
)

// When a Send times out, ending the stream is not enough to free what gRPC
// holds for it: its queued response and trailers wait in the connection's
// writer for a window the client never opens, until the TCP connection
// closes. So the server closes the client's connection too. Listener wraps
// the listeners the ADS service is served on, to find a stream's
// connection by its peer address.

// Listener wraps lis so that the server can close the connection of a
// client whose Send timed out (every stream on it ends).
func (s *DiscoveryServer) Listener(lis net.Listener) net.Listener {
	return &trackedListener{Listener: lis, table: &s.netConns}
}

// connTable maps a remote address to its accepted connection.
type connTable struct {
	mu    sync.Mutex
	conns map[string]*trackedConn
}

// closePeer closes the connection of the stream whose context is ctx and
// reports whether it found one.
func (t *connTable) closePeer(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return false
	}
	t.mu.Lock()
	c := t.conns[p.Addr.String()]
	t.mu.Unlock()
	if c == nil {
		return false
	}
	_ = c.Close()
	return true
}

type trackedListener struct {
	net.Listener
	table *connTable
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, table: l.table, key: c.RemoteAddr().String()}
	l.table.mu.Lock()
	if l.table.conns == nil {
		l.table.conns = map[string]*trackedConn{}
	}
	l.table.conns[tc.key] = tc
	l.table.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	table *connTable
	key   string
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.table.mu.Lock()
		if c.table.conns[c.key] == c {
			delete(c.table.conns, c.key)
		}
		c.table.mu.Unlock()
	})
	return c.Conn.Close()
}
