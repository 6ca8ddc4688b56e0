package dns

import (
	"net"
	"sync"
)

// tcpConns is the set of open TCP connections, at most max. A connection
// accepted at the cap evicts the one idle longest, so the cap bounds
// descriptors without letting clients that query just often enough to
// beat the idle timeout lock everyone else out (issue 32, item 11).
// Istio's agent (miekg/dns) has no cap at all; a cap that refused new
// connections would turn a full set into a denial of service, and RFC
// 7766 (section 6.2.3) lets a server close idle connections, which
// clients must expect.
type tcpConns struct {
	max int

	mu sync.Mutex
	// clock orders activity: it ticks at every query read and every
	// answer sent, so "idle longest" needs no wall clock (and has no ties).
	clock uint64
	conns map[*tcpConn]struct{}
}

// tcpConn is one connection of a tcpConns; busy and last are guarded by
// the set's mu.
type tcpConn struct {
	net.Conn
	// busy is true from a query read until its answer is sent.
	busy bool
	// last is the set's clock at the connection's last activity.
	last uint64
}

func newTCPConns(max int) *tcpConns {
	return &tcpConns{max: max, conns: make(map[*tcpConn]struct{}, max)}
}

// add registers c. At the cap it first removes and returns the victim,
// which the caller closes: the idlest connection that is not in the middle
// of a query or, when every one is, the one whose query began first.
func (s *tcpConns) add(c net.Conn) (tc, victim *tcpConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) >= s.max {
		for o := range s.conns {
			if victim == nil || (victim.busy && !o.busy) || (victim.busy == o.busy && o.last < victim.last) {
				victim = o
			}
		}
		delete(s.conns, victim)
	}
	s.clock++
	tc = &tcpConn{Conn: c, last: s.clock}
	s.conns[tc] = struct{}{}
	return tc, victim
}

// remove forgets tc (a no-op once evicted).
func (s *tcpConns) remove(tc *tcpConn) {
	s.mu.Lock()
	delete(s.conns, tc)
	s.mu.Unlock()
}

// active records activity on tc: a query read (busy) or its answer sent.
func (s *tcpConns) active(tc *tcpConn, busy bool) {
	s.mu.Lock()
	s.clock++
	tc.last, tc.busy = s.clock, busy
	s.mu.Unlock()
}

// len is the number of registered connections.
func (s *tcpConns) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
