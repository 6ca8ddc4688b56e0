// Package dns is the agent's DNS proxy, for pods with DNS capture
// (ISTIO_META_DNS_CAPTURE=true, whose iptables rules redirect port 53 to
// 15053). It answers A and AAAA queries for the mesh's hosts from the
// NameTable the control plane sends over NDS — Kubernetes services under
// their full and short names, ServiceEntry hosts with their addresses or
// auto-allocated VIPs — and forwards every other query to the pod's own
// resolvers from /etc/resolv.conf, as Istio's agent does.
package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/internal/nds"
)

// Defaults of Options.
const (
	DefaultAddr            = "127.0.0.1:15053"
	DefaultResolvConf      = "/etc/resolv.conf"
	DefaultUpstreamTimeout = 5 * time.Second
	DefaultMaxInFlight     = 256
	DefaultMaxTCPConns     = 64
	DefaultTCPIdleTimeout  = 10 * time.Second
)

// Options configure the DNS proxy. The agent fills them once.
type Options struct {
	// Addr is where the proxy listens, UDP and TCP on the same port;
	// port 0 picks a free one (tests). Default DefaultAddr.
	Addr string
	// ResolvConf is the file whose nameservers get forwarded queries.
	// Default DefaultResolvConf.
	ResolvConf string
	// Upstreams, when set, replace ResolvConf's nameservers (host:port).
	Upstreams []string
	// Namespace is the pod's namespace and Domain its cluster domain
	// ("cluster.local"): they give the short names of Kubernetes services
	// and the search domains of expanded queries.
	Namespace string
	Domain    string
	// UpstreamTimeout bounds each upstream attempt. Default DefaultUpstreamTimeout.
	UpstreamTimeout time.Duration
	// MaxInFlight is the number of upstream slots: queries being
	// forwarded at once. A query to forward when every slot is taken gets
	// SERVFAIL at once. Names the table answers take no slot: they are
	// answered on the reading goroutine, never behind the upstream.
	// Default DefaultMaxInFlight.
	MaxInFlight int
	// MaxTCPConns bounds open TCP connections; a connection accepted at
	// the cap closes the one idle longest. Default DefaultMaxTCPConns.
	MaxTCPConns int
	// TCPIdleTimeout closes a TCP connection with no complete query for
	// this long. Default DefaultTCPIdleTimeout.
	TCPIdleTimeout time.Duration
	// Log is nil for slog.Default().
	Log *slog.Logger
}

// Server is the DNS proxy. UpdateTable may be called at any time, before
// or while Run runs.
type Server struct {
	opts      Options
	log       *slog.Logger
	upstreams []string
	table     atomic.Pointer[table]
	ready     chan struct{}
	// slots holds a token per query being forwarded (MaxInFlight).
	slots chan struct{}
	conns *tcpConns

	udpAddr, tcpAddr net.Addr // set before ready is closed
	forwarded        atomic.Uint64
	answered         atomic.Uint64
	shed             atomic.Uint64
	evicted          atomic.Uint64
}

// New returns a proxy; it reads the upstream resolvers now.
func New(o Options) (*Server, error) {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.ResolvConf == "" {
		o.ResolvConf = DefaultResolvConf
	}
	if o.UpstreamTimeout <= 0 {
		o.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxTCPConns <= 0 {
		o.MaxTCPConns = DefaultMaxTCPConns
	}
	if o.TCPIdleTimeout <= 0 {
		o.TCPIdleTimeout = DefaultTCPIdleTimeout
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	ups := o.Upstreams
	if len(ups) == 0 {
		var err error
		if ups, err = readResolvConf(o.ResolvConf); err != nil {
			return nil, fmt.Errorf("dns proxy: %w", err)
		}
		if len(ups) == 0 {
			log.Warn("dns proxy: no nameserver in resolv.conf; names outside the mesh will fail", "path", o.ResolvConf)
		}
	}
	return &Server{
		opts: o, log: log, upstreams: ups, ready: make(chan struct{}),
		slots: make(chan struct{}, o.MaxInFlight), conns: newTCPConns(o.MaxTCPConns),
	}, nil
}

// UpdateTable replaces the name table the proxy answers from.
func (s *Server) UpdateTable(nt nds.NameTable) {
	s.table.Store(newTable(nt, s.opts.Namespace, s.opts.Domain))
	s.log.Debug("dns proxy: name table updated", "hosts", len(nt))
}

// Ready is closed once the proxy listens.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// UDPAddr and TCPAddr are the listening addresses, valid once Ready is closed.
func (s *Server) UDPAddr() net.Addr { return s.udpAddr }

// TCPAddr: see UDPAddr.
func (s *Server) TCPAddr() net.Addr { return s.tcpAddr }

// Forwarded counts queries sent upstream; Answered those answered from the table.
func (s *Server) Forwarded() uint64 { return s.forwarded.Load() }

// Answered: see Forwarded.
func (s *Server) Answered() uint64 { return s.answered.Load() }

// Shed counts queries to forward that got SERVFAIL because every upstream
// slot was taken.
func (s *Server) Shed() uint64 { return s.shed.Load() }

// Evicted counts TCP connections closed to make room for a new one.
func (s *Server) Evicted() uint64 { return s.evicted.Load() }

// Run serves until ctx is done, then closes the listeners and waits for
// every query in progress. Call it once.
func (s *Server) Run(ctx context.Context) error {
	udp, tcp, err := listen(ctx, s.opts.Addr)
	if err != nil {
		return fmt.Errorf("dns proxy: %w", err)
	}
	s.udpAddr, s.tcpAddr = udp.LocalAddr(), tcp.Addr()
	s.log.Info("dns proxy listening", "udp", s.udpAddr.String(), "tcp", s.tcpAddr.String(), "upstreams", s.upstreams)
	close(s.ready)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.serveUDP(ctx, udp, &wg) }()
	go func() { defer wg.Done(); s.serveTCP(ctx, tcp, &wg) }()
	<-ctx.Done()
	udp.Close()
	tcp.Close()
	wg.Wait()
	return nil
}

// listen opens UDP and TCP on one port (a free one for port 0).
func listen(ctx context.Context, addr string) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("address %q: %w", addr, err)
	}
	var lc net.ListenConfig
	for attempt := 0; ; attempt++ {
		udp, err := lc.ListenPacket(ctx, "udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen udp %s: %w", addr, err)
		}
		_, p, _ := net.SplitHostPort(udp.LocalAddr().String())
		tcp, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, p))
		if err == nil {
			return udp, tcp, nil
		}
		udp.Close()
		if port != "0" || attempt >= 10 {
			return nil, nil, fmt.Errorf("listen tcp %s: %w", net.JoinHostPort(host, p), err)
		}
	}
}

// serveUDP reads queries, answers the table's names on this goroutine
// and hands the others to a goroutine each, while an upstream slot is free.
func (s *Server) serveUDP(ctx context.Context, conn net.PacketConn, wg *sync.WaitGroup) {
	buf := make([]byte, maxMessage)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("dns proxy: udp read failed", clientlog.Error("error", err))
			}
			return
		}
		resp, q, fwd := s.local(buf[:n], false)
		if fwd && !s.takeSlot() {
			resp, fwd = s.servfail(q), false
		}
		if !fwd {
			if resp != nil {
				_, _ = conn.WriteTo(resp, from)
			}
			continue
		}
		msg := append([]byte(nil), buf[:n]...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.releaseSlot()
			if resp := s.forwardQuery(ctx, q, msg, false); resp != nil {
				_, _ = conn.WriteTo(resp, from)
			}
		}()
	}
}

func (s *Server) serveTCP(ctx context.Context, l net.Listener, wg *sync.WaitGroup) {
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("dns proxy: tcp accept failed", clientlog.Error("error", err))
			}
			return
		}
		tc, victim := s.conns.add(conn)
		if victim != nil {
			// Its goroutine sees the close and exits; its descriptor is
			// released at once.
			victim.Close()
			s.evicted.Add(1)
			s.log.Debug("dns proxy: closed the idlest tcp connection for a new one",
				clientlog.String("client", victim.RemoteAddr().String()))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.conns.remove(tc)
			s.serveTCPConn(ctx, tc)
		}()
	}
}

// serveTCPConn answers the queries of one connection in order until it is
// idle for TCPIdleTimeout, fails, is evicted, or ctx ends.
func (s *Server) serveTCPConn(ctx context.Context, tc *tcpConn) {
	conn := tc.Conn
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	for {
		if err := conn.SetDeadline(time.Now().Add(s.opts.TCPIdleTimeout)); err != nil {
			return
		}
		msg, err := readTCPMessage(conn)
		if err != nil {
			return
		}
		s.conns.active(tc, true)
		resp, q, fwd := s.local(msg, true)
		if fwd {
			if s.takeSlot() {
				resp = s.forwardQuery(ctx, q, msg, true)
				s.releaseSlot()
			} else {
				resp = s.servfail(q)
			}
		}
		if resp == nil {
			return
		}
		if err := conn.SetDeadline(time.Now().Add(s.opts.UpstreamTimeout)); err != nil {
			return
		}
		if err := writeTCPMessage(conn, resp); err != nil {
			return
		}
		s.conns.active(tc, false)
	}
}

// takeSlot takes an upstream slot if one is free; false counts a shed query.
func (s *Server) takeSlot() bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
		s.shed.Add(1)
		return false
	}
}

func (s *Server) releaseSlot() { <-s.slots }

// local answers msg without the upstream when it can: resp is the table's
// answer or FORMERR, or nil for no response. Otherwise fwd is true and q
// is the query to forward. It is cheap (no I/O), so readers call it inline.
func (s *Server) local(msg []byte, tcp bool) (resp []byte, q query, fwd bool) {
	q, err := parseQuery(msg)
	if err != nil {
		if errors.Is(err, errNotQuery) || q.header.Response {
			return nil, q, false
		}
		resp, ferr := failure(query{header: q.header}, dnsmessage.RCodeFormatError)
		if ferr != nil {
			return nil, q, false
		}
		return resp, q, false
	}
	if q.question.Class == dnsmessage.ClassINET {
		if e, alias, ok := s.table.Load().lookup(q.name()); ok {
			resp, err := answer(q, e, alias, !tcp)
			if err != nil {
				s.log.Warn("dns proxy: building answer failed", clientlog.String("name", q.name()), clientlog.Error("error", err))
				return s.servfail(q), q, false
			}
			s.answered.Add(1)
			return resp, q, false
		}
	}
	return nil, q, true
}

// forwardQuery returns the upstream's response to msg (query q), SERVFAIL
// when no upstream answers, or nil once ctx is done. The caller holds an
// upstream slot.
func (s *Server) forwardQuery(ctx context.Context, q query, msg []byte, tcp bool) []byte {
	s.forwarded.Add(1)
	resp, err := forward(ctx, s.upstreams, msg, tcp, s.opts.UpstreamTimeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		s.log.Debug("dns proxy: upstream query failed", clientlog.String("name", q.name()),
			"type", strconv.Itoa(int(q.question.Type)), clientlog.Error("error", err))
		return s.servfail(q)
	}
	return resp
}

func (s *Server) servfail(q query) []byte {
	resp, err := failure(q, dnsmessage.RCodeServerFailure)
	if err != nil {
		return nil
	}
	return resp
}
