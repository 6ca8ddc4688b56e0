package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/meshpilot/meshpilot/internal/nds"
)

// stubUpstream is the pod's resolver in tests: a DNS server on loopback
// (UDP and TCP, one port) that answers A queries for its names and
// NXDOMAIN for the rest, and records what it was asked.
type stubUpstream struct {
	addr    string
	records map[string]netip.Addr
	mu      sync.Mutex
	asked   []string
	tcp     atomic.Int64
}

func startStub(t *testing.T, records map[string]netip.Addr) *stubUpstream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	udp, tcp, err := listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stubUpstream{addr: udp.LocalAddr().String(), records: records}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, maxMessage)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := s.respond(buf[:n]); resp != nil {
				_, _ = udp.WriteTo(resp, from)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			s.tcp.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				for {
					msg, err := readTCPMessage(c)
					if err != nil {
						return
					}
					if resp := s.respond(msg); resp != nil {
						_ = writeTCPMessage(c, resp)
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		udp.Close()
		tcp.Close()
		wg.Wait()
	})
	return s
}

func (s *stubUpstream) respond(msg []byte) []byte {
	q, err := parseQuery(msg)
	if err != nil {
		return nil
	}
	name := q.name()
	s.mu.Lock()
	s.asked = append(s.asked, name)
	s.mu.Unlock()
	ip, ok := s.records[name]
	if !ok {
		b, _ := failure(q, dnsmessage.RCodeNameError)
		return b
	}
	b := newResponse(q, dnsmessage.RCodeSuccess)
	_ = b.StartAnswers()
	if q.question.Type == dnsmessage.TypeA {
		_ = b.AResource(dnsmessage.ResourceHeader{Name: q.question.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: ip.As4()})
	}
	out, _ := b.Finish()
	return out
}

func (s *stubUpstream) saw(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.asked {
		if a == name {
			return true
		}
	}
	return false
}

// startProxy runs a DNS proxy on a free loopback port for the pod of
// namespace default in cluster.local, forwarding to upstreams, and stops
// it (checking that Run returns) when the test ends.
func startProxy(t *testing.T, nt nds.NameTable, upstreams ...string) *Server {
	t.Helper()
	return startProxyOpts(t, nt, Options{Upstreams: upstreams, UpstreamTimeout: 2 * time.Second})
}

// startProxyOpts is startProxy with options: Addr, Namespace, Domain and
// Log are set here.
func startProxyOpts(t *testing.T, nt nds.NameTable, o Options) *Server {
	t.Helper()
	o.Addr, o.Namespace, o.Domain, o.Log = "127.0.0.1:0", "default", "cluster.local", slog.New(slog.DiscardHandler)
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if nt != nil {
		s.UpdateTable(nt)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("dns proxy: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return s
}

// resolver is Go's DNS client sending every query to addr, over UDP or
// TCP as Go chooses (TCP after a truncated answer).
func resolver(addr string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}

func lookup(t *testing.T, r *net.Resolver, name, network string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ips, err := r.LookupNetIP(ctx, network, name)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return nil
		}
		t.Fatalf("lookup %s: %v", name, err)
	}
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.Unmap().String()
	}
	return out
}

func trimDot(s string) string { return strings.TrimSuffix(s, ".") }

// newQuery is a query of type A for name with ID id.
func newQuery(t *testing.T, id uint16, name string) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	_ = b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// reply is what tests check of a response: its ID, rcode and A records.
type reply struct {
	id    uint16
	rcode dnsmessage.RCode
	a     []string
}

func parseReply(b []byte) (reply, error) {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil {
		return reply{}, err
	}
	r := reply{id: h.ID, rcode: h.RCode}
	if err := p.SkipAllQuestions(); err != nil {
		return r, err
	}
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return r, nil
		}
		if err != nil {
			return r, err
		}
		if rh.Type != dnsmessage.TypeA {
			if err := p.SkipAnswer(); err != nil {
				return r, err
			}
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return r, err
		}
		r.a = append(r.a, netip.AddrFrom4(a.A).String())
	}
}

// exchangeTCP sends one query on c and reads its response, both within
// the deadline.
func exchangeTCP(c net.Conn, msg []byte, deadline time.Time) (reply, error) {
	if err := c.SetDeadline(deadline); err != nil {
		return reply{}, err
	}
	if err := writeTCPMessage(c, msg); err != nil {
		return reply{}, fmt.Errorf("write: %w", err)
	}
	resp, err := readTCPMessage(c)
	if err != nil {
		return reply{}, fmt.Errorf("read: %w", err)
	}
	return parseReply(resp)
}
