package gatewaydns

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeDNS answers from a table the test changes; names missing fail.
type fakeDNS struct {
	mu      sync.Mutex
	answers map[string][]string
}

func (f *fakeDNS) set(name string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if addrs == nil {
		delete(f.answers, name)
		return
	}
	f.answers[name] = addrs
}

func (f *fakeDNS) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.answers[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	out := make([]netip.Addr, 0, len(a))
	for _, s := range a {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// TestResolver: a new name is resolved off the caller's path and a push is
// asked for; a changed answer asks again; a failed lookup keeps the last
// addresses; a name no longer in the latest set is dropped.
func TestResolver(t *testing.T) {
	dns := &fakeDNS{answers: map[string][]string{"gw.example.com": {"192.0.2.2", "192.0.2.1"}}}
	changes := make(chan struct{}, 10)
	r := New(Options{Lookup: dns.lookup, Refresh: time.Hour, OnChange: func() { changes <- struct{}{} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if got := r.Resolve([]string{"gw.example.com"})["gw.example.com"]; got != nil {
		t.Fatalf("first Resolve %v: want nothing yet (it never waits)", got)
	}
	<-changes
	if got := r.Resolve([]string{"gw.example.com"})["gw.example.com"]; !slices.Equal(got, []string{"192.0.2.1", "192.0.2.2"}) {
		t.Fatalf("after the push: %v", got)
	}

	dns.set("gw.example.com", "192.0.2.3")
	r.refresh(ctx, false)
	<-changes
	if got := r.Resolve([]string{"gw.example.com"})["gw.example.com"]; !slices.Equal(got, []string{"192.0.2.3"}) {
		t.Fatalf("after a changed answer: %v", got)
	}

	dns.set("gw.example.com")
	r.refresh(ctx, false)
	if got := r.Resolve([]string{"gw.example.com"})["gw.example.com"]; !slices.Equal(got, []string{"192.0.2.3"}) {
		t.Fatalf("after a failed lookup: %v, want the last addresses", got)
	}
	select {
	case <-changes:
		t.Fatal("a failed lookup asked for a push")
	default:
	}

	r.Resolve(nil)
	r.mu.Lock()
	n := len(r.names)
	r.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d names followed after an empty set", n)
	}
}

// TestResolveBounded: at most maxNames names are followed.
func TestResolveBounded(t *testing.T) {
	r := New(Options{Lookup: (&fakeDNS{answers: map[string][]string{}}).lookup})
	names := make([]string, maxNames+10)
	for i := range names {
		names[i] = string(rune('a'+i%26)) + "-" + time.Duration(i).String() + ".example.com"
	}
	if got := len(r.Resolve(names)); got != maxNames {
		t.Fatalf("%d names answered, want %d", got, maxNames)
	}
}
