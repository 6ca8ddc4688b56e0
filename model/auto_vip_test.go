package model

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func TestVIPForSlotBounds(t *testing.T) {
	for _, tc := range []struct {
		slot   uint32
		v4, v6 string
	}{
		{0, "240.240.0.1", "2001:2::f0f0:1"},
		{253, "240.240.0.254", "2001:2::f0f0:fe"},
		{254, "240.240.1.1", "2001:2::f0f0:101"},
		{507, "240.240.1.254", "2001:2::f0f0:1fe"},
		{508, "240.240.2.1", "2001:2::f0f0:201"},
		{vipSlots - 1, "240.240.255.254", "2001:2::f0f0:fffe"},
	} {
		if got := vipForSlot(tc.slot); got.IPv4 != tc.v4 || got.IPv6 != tc.v6 {
			t.Errorf("slot %d: got %+v, want %s %s", tc.slot, got, tc.v4, tc.v6)
		}
	}
	seen := map[string]bool{}
	prefix4 := netip.MustParsePrefix("240.240.0.0/16")
	prefix6 := netip.MustParsePrefix("2001:2::/48")
	for s := uint32(0); s < vipSlots; s++ {
		v := vipForSlot(s)
		a := netip.MustParseAddr(v.IPv4)
		b := a.As4()
		if !prefix4.Contains(a) || b[3] == 0 || b[3] == 255 {
			t.Fatalf("slot %d: %s outside 240.240.0.0/16 or ends in .0/.255", s, a)
		}
		if !prefix6.Contains(netip.MustParseAddr(v.IPv6)) {
			t.Fatalf("slot %d: %s outside 2001:2::/48", s, v.IPv6)
		}
		if seen[v.IPv4] || seen[v.IPv6] {
			t.Fatalf("slot %d: %+v given twice", s, v)
		}
		seen[v.IPv4], seen[v.IPv6] = true, true
	}
}

func se(ns, host string, res Resolution, addr string) *Service {
	return &Service{Hostname: host, Namespace: ns, Name: host, Registry: RegistryServiceEntry, Resolution: res, Address: addr}
}

func TestAllocateVIPsRules(t *testing.T) {
	svcs := []*Service{
		se("default", "api.example.com", DNSLB, ""),
		se("default", "static.example.com", ClientSideLB, "0.0.0.0"),
		se("default", "none.example.com", Passthrough, ""),     // NONE: no VIP
		se("default", "*.wild.example.com", DNSLB, ""),         // wildcard: no VIP
		se("default", "addr.example.com", DNSLB, "192.0.2.10"), // has an address
		{Hostname: "reviews.default.svc.cluster.local", Namespace: "default", Registry: RegistryKubernetes, Resolution: Passthrough},
	}
	got := AllocateVIPs(svcs)
	if len(got) != 2 {
		t.Fatalf("got VIPs for %v, want api.example.com and static.example.com only", got)
	}
	for _, h := range []string{"api.example.com", "static.example.com"} {
		if _, ok := got[h]; !ok {
			t.Errorf("%s: no VIP", h)
		}
	}
	if got["api.example.com"] == got["static.example.com"] {
		t.Error("two hosts share a VIP")
	}
}

// TestAllocateVIPsStable: the allocation is a function of the set of
// keys, whatever their order (a restart lists them differently), and a
// host keeps its address when others come and go unless they collide.
func TestAllocateVIPsStable(t *testing.T) {
	var svcs []*Service
	for i := range 3000 {
		svcs = append(svcs, se(fmt.Sprintf("ns%d", i%7), fmt.Sprintf("h%d.example.com", i), DNSLB, ""))
	}
	want := AllocateVIPs(svcs)
	if len(want) != len(svcs) {
		t.Fatalf("allocated %d of %d", len(want), len(svcs))
	}
	seen := map[string]string{}
	for h, v := range want {
		if other, dup := seen[v.IPv4]; dup {
			t.Fatalf("%s and %s share %s", h, other, v.IPv4)
		}
		seen[v.IPv4] = h
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		shuffled := append([]*Service(nil), svcs...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got := AllocateVIPs(shuffled)
		for h, v := range want {
			if got[h] != v {
				t.Fatalf("%s: %+v after reordering, was %+v", h, got[h], v)
			}
		}
	}
	// A host alone gets the slot of its hash: the same as in the big set
	// unless it collided there.
	one := AllocateVIPs(svcs[:1])
	if one["h0.example.com"] != want["h0.example.com"] {
		t.Logf("h0 moved when alone (it collided in the big set): %v vs %v", one, want["h0.example.com"])
	}
}

func TestAllocateVIPsFull(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates every address")
	}
	var svcs []*Service
	for i := range vipSlots + 10 {
		svcs = append(svcs, se("ns", fmt.Sprintf("h%d.example.com", i), DNSLB, ""))
	}
	got := AllocateVIPs(svcs)
	if len(got) != vipSlots {
		t.Fatalf("allocated %d, want every one of the %d addresses", len(got), vipSlots)
	}
}
