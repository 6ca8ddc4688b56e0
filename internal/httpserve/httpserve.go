// Package httpserve builds every HTTP server meshpilot runs (istiod's
// --httpAddr, --monitoringAddr and --debugAddr, the admission webhooks on
// 15017, the agent's status port) with the same bounds: timeouts for
// reading headers, reading a request, writing an answer and keeping an
// idle connection, a header size limit, and a cap on open connections.
//
// The cap keeps HTTP clients from taking the process's file descriptors,
// which the xDS (gRPC) listeners and the readiness probe need too. At the
// cap a new connection is not refused: the longest-waiting connection that
// carries no request (an idle keep-alive, or one that has sent nothing
// yet) is closed to make room, so a new client such as the kubelet's /ready
// probe is served at once however many idle connections others keep open.
// Only when every connection is busy with a request does Accept wait for
// one to end; the timeouts bound how long that takes, and meanwhile the
// kernel's accept backlog, not a descriptor of ours, holds the newcomers.
package httpserve

import (
	"container/list"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults of Limits' fields.
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers (and, on
	// a new connection, the TLS handshake): slow-loris clients are cut off.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included.
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds a request from the end of its headers to
	// the end of its answer (the handler's work included).
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection without a request
	// for this long. Prometheus' usual scrape intervals (15-30 s) keep
	// their connection; the kubelet's probes do not keep connections.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxHeaderBytes bounds a request's headers (Go's default is 1 MiB).
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConns caps the open connections of one server: about 5 MB
	// of buffers and goroutines, far below any descriptor limit.
	DefaultMaxConns = 256
)

// Limits bound one HTTP server. A zero field takes its Default constant; a
// negative duration means no timeout (for tests and deliberate exemptions).
type Limits struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
	// MaxConns caps the open connections (see the package comment).
	MaxConns int
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0 // http.Server: no timeout
		}
	}
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.ReadTimeout, DefaultReadTimeout)
	def(&l.WriteTimeout, DefaultWriteTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	return l
}

// Server is an *http.Server whose Serve and ServeTLS apply the connection
// cap; Shutdown and Close are http.Server's.
type Server struct {
	*http.Server
	conns *conns
}

// New returns a server of h bounded by l (zero fields: defaults); name
// labels its log lines. Set TLSConfig or BaseContext on the result as needed.
func New(name string, h http.Handler, l Limits, log *slog.Logger) *Server {
	l = l.WithDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("server", name)
	c := newConns(l.MaxConns, log)
	return &Server{
		Server: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: l.ReadHeaderTimeout,
			ReadTimeout:       l.ReadTimeout,
			WriteTimeout:      l.WriteTimeout,
			IdleTimeout:       l.IdleTimeout,
			MaxHeaderBytes:    l.MaxHeaderBytes,
			ConnState:         c.state,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		conns: c,
	}
}

// Serve serves plain HTTP on lis, at most MaxConns connections at once.
func (s *Server) Serve(lis net.Listener) error {
	return s.Server.Serve(s.conns.listener(lis))
}

// ServeTLS serves HTTPS on lis (TLSConfig's certificates when the files
// are empty), at most MaxConns connections at once.
func (s *Server) ServeTLS(lis net.Listener, certFile, keyFile string) error {
	return s.Server.ServeTLS(s.conns.listener(lis), certFile, keyFile)
}

// Open is the number of connections currently open.
func (s *Server) Open() int {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return s.conns.open
}

// conns counts a server's open connections and orders those without a
// request (new or idle) by how long they have waited.
type conns struct {
	max int
	log *slog.Logger

	mu    sync.Mutex
	open  int
	quiet *list.List              // of *conn, longest waiting first
	elems map[*conn]*list.Element // the conns in quiet
	freed chan struct{}           // signalled (buffered 1) when a conn closes
}

func newConns(max int, log *slog.Logger) *conns {
	return &conns{max: max, log: log, quiet: list.New(), elems: map[*conn]*list.Element{}, freed: make(chan struct{}, 1)}
}

// conn is an accepted connection; its first Close frees its place.
type conn struct {
	net.Conn
	owner *conns
	once  sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.owner.release(c) })
	return err
}

func (cs *conns) release(c *conn) {
	cs.mu.Lock()
	cs.open--
	cs.unquiet(c)
	cs.mu.Unlock()
	select {
	case cs.freed <- struct{}{}:
	default:
	}
}

// unquiet removes c from the quiet list; cs.mu is held.
func (cs *conns) unquiet(c *conn) {
	if e, ok := cs.elems[c]; ok {
		cs.quiet.Remove(e)
		delete(cs.elems, c)
	}
}

// state is the http.Server's ConnState hook.
func (cs *conns) state(nc net.Conn, st http.ConnState) {
	// ServeTLS hands the hook the *tls.Conn around our conn.
	for {
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		nc = u.NetConn()
	}
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.unquiet(c)
	if st == http.StateNew || st == http.StateIdle {
		cs.elems[c] = cs.quiet.PushBack(c)
	}
}

// admit makes room for one more connection: it closes the longest-waiting
// quiet connection when at the cap, or waits for one to close when every
// connection is busy. It fails when done is closed first.
func (cs *conns) admit(done <-chan struct{}) error {
	for {
		cs.mu.Lock()
		if cs.open < cs.max {
			cs.open++
			cs.mu.Unlock()
			return nil
		}
		var victim *conn
		if e := cs.quiet.Front(); e != nil {
			victim = e.Value.(*conn)
			cs.unquiet(victim)
		}
		cs.mu.Unlock()
		if victim != nil {
			cs.log.Debug("connection cap reached: closing the longest-waiting connection without a request",
				"max_conns", cs.max, "peer", victim.RemoteAddr().String())
			_ = victim.Close()
			continue
		}
		select {
		case <-cs.freed:
		case <-done:
			return net.ErrClosed
		}
	}
}

func (cs *conns) listener(lis net.Listener) net.Listener {
	return &listener{Listener: lis, conns: cs, done: make(chan struct{})}
}

// listener applies the cap: a connection is accepted, then room is made
// for it (so quiet connections are closed only for a real newcomer; one
// accepted connection at most waits beyond the cap).
type listener struct {
	net.Listener
	conns     *conns
	done      chan struct{}
	closeOnce sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := l.conns.admit(l.done); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return &conn{Conn: nc, owner: l.conns}, nil
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}
