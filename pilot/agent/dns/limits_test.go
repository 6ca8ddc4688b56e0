package dns

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/meshpilot/meshpilot/internal/nds"
)

// bound is how long a test waits for an answer the proxy owes: a
// correctness bound, generous for a loaded machine under -race.
const bound = 5 * time.Second

// limitsTable is one mesh name, reviews.default, to reviewsVIP.
func limitsTable() nds.NameTable {
	return nds.NameTable{"reviews.default.svc.cluster.local": {
		IPs: []string{reviewsVIP}, Registry: "Kubernetes", Shortname: "reviews", Namespace: "default"}}
}

// TestTCPEvictsIdlest (issue 32, item 11): TCP clients that each keep
// querying more often than the idle timeout fill the connection cap; a new
// client is still served, and the connection idle longest is the one
// closed for it.
func TestTCPEvictsIdlest(t *testing.T) {
	t.Parallel()
	const maxConns = 4
	p := startProxyOpts(t, limitsTable(), Options{MaxTCPConns: maxConns, TCPIdleTimeout: time.Minute})
	addr := p.TCPAddr().String()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, bound)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ask := func(c net.Conn, id uint16) error {
		r, err := exchangeTCP(c, newQuery(t, id, "reviews.default.svc.cluster.local."), time.Now().Add(bound))
		if err != nil {
			return err
		}
		if r.id != id || r.rcode != dnsmessage.RCodeSuccess || !slices.Equal(r.a, []string{reviewsVIP}) {
			return fmt.Errorf("response %+v, want ID %d with A %s", r, id, reviewsVIP)
		}
		return nil
	}
	keepers := make([]net.Conn, maxConns)
	for i := range keepers {
		keepers[i] = dial()
	}
	// Two rounds of queries, keeper 0 first each time: it is the idlest,
	// though none has been idle for anything near the idle timeout.
	for round := range 2 {
		for i, c := range keepers {
			if err := ask(c, uint16(100*round+i)); err != nil {
				t.Fatalf("keeper %d, round %d: %v", i, round, err)
			}
		}
	}
	if err := ask(dial(), 999); err != nil {
		t.Fatalf("a new TCP client with %d busy ones open: %v", maxConns, err)
	}
	// The idlest keeper was closed for it; the others are still served.
	_ = keepers[0].SetReadDeadline(time.Now().Add(bound))
	if n, err := keepers[0].Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("idlest keeper: read %d bytes, %v; want its connection closed", n, err)
	}
	for i, c := range keepers[1:] {
		if err := ask(c, uint16(200+i)); err != nil {
			t.Errorf("keeper %d after the eviction: %v", i+1, err)
		}
	}
	if n := p.Evicted(); n != 1 {
		t.Errorf("%d connections evicted, want 1", n)
	}
	if n := p.conns.len(); n > maxConns {
		t.Errorf("%d TCP connections registered, cap %d", n, maxConns)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// countingSink is an upstream that reads every query and never answers;
// each datagram read is sent on got.
func countingSink(t *testing.T) (addr string, got <-chan struct{}) {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, maxMessage)
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				return
			}
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return c.LocalAddr().String(), ch
}

// TestTableAnswersSkipUpstreamSlots (issue 32, item 12): with every
// upstream slot held by a query to an upstream that never answers, mesh
// names are still answered, over UDP and TCP, and further external
// queries fail at once (SERVFAIL) instead of waiting for a slot.
func TestTableAnswersSkipUpstreamSlots(t *testing.T) {
	t.Parallel()
	const slots, mesh = 8, 40
	up, upGot := countingSink(t)
	p := startProxyOpts(t, limitsTable(), Options{Upstreams: []string{up}, MaxInFlight: slots, UpstreamTimeout: time.Minute})
	c, err := net.Dial("udp", p.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(id uint16, name string) {
		t.Helper()
		if _, err := c.Write(newQuery(t, id, name)); err != nil {
			t.Fatal(err)
		}
	}
	// Fill every slot: the upstream has then read one query per slot.
	for i := range slots {
		send(uint16(1000+i), fmt.Sprintf("fill-%d.outside.example.org.", i))
	}
	timeout := time.After(bound)
	for i := range slots {
		select {
		case <-upGot:
		case <-timeout:
			t.Fatalf("the upstream read %d queries, want %d", i, slots)
		}
	}
	// External and mesh queries, interleaved, while the slots are held.
	for i := range mesh {
		send(uint16(2000+i), fmt.Sprintf("more-%d.outside.example.org.", i))
		send(uint16(3000+i), "reviews.default.svc.cluster.local.")
	}
	var answered, failed int
	_ = c.SetReadDeadline(time.Now().Add(bound))
	buf := make([]byte, maxMessage)
	for answered < mesh || failed < mesh {
		n, err := c.Read(buf)
		if err != nil {
			break
		}
		r, err := parseReply(buf[:n])
		if err != nil {
			t.Fatalf("response: %v", err)
		}
		switch {
		case r.id >= 3000 && r.id < 3000+mesh:
			if r.rcode != dnsmessage.RCodeSuccess || !slices.Equal(r.a, []string{reviewsVIP}) {
				t.Errorf("mesh name: %+v, want A %s", r, reviewsVIP)
			}
			answered++
		case r.id >= 2000 && r.id < 2000+mesh:
			if r.rcode != dnsmessage.RCodeServerFailure {
				t.Errorf("external name beyond the slots: %+v, want SERVFAIL", r)
			}
			failed++
		default:
			t.Errorf("unexpected response %+v", r)
		}
	}
	if answered != mesh {
		t.Errorf("UDP: %d of %d mesh-name queries answered with every upstream slot held", answered, mesh)
	}
	if failed != mesh {
		t.Errorf("UDP: %d of %d external queries beyond the slots got SERVFAIL", failed, mesh)
	}

	tc, err := net.DialTimeout("tcp", p.TCPAddr().String(), bound)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	r, err := exchangeTCP(tc, newQuery(t, 4000, "reviews.default.svc.cluster.local."), time.Now().Add(bound))
	if err != nil || r.rcode != dnsmessage.RCodeSuccess || !slices.Equal(r.a, []string{reviewsVIP}) {
		t.Fatalf("TCP mesh name with every upstream slot held: %+v, %v", r, err)
	}
	r, err = exchangeTCP(tc, newQuery(t, 4001, "tcp.outside.example.org."), time.Now().Add(bound))
	if err != nil || r.rcode != dnsmessage.RCodeServerFailure {
		t.Errorf("TCP external name with every upstream slot held: %+v, %v; want SERVFAIL", r, err)
	}
}
