package model

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"sort"
	"strings"
)

// Auto-allocation of VIPs for ServiceEntry hosts without addresses, as
// Istio's ServiceEntry registry does: IPv4 from the reserved class E range
// 240.240.0.0/16, IPv6 from the benchmarking range 2001:2::/48 (RFC 5180).
// Proxies that set DNS_AUTO_ALLOCATE (and DNS_CAPTURE) resolve such hosts to
// these addresses through the agent's DNS proxy.
const (
	// vipSlots is the number of addresses: 254 usable fourth octets for
	// each of the 256 third octets (Istio's maxIPs, 256*254).
	vipSlots = 256 * 254
	// vipPrime is the prime of the second hash (Istio's 65011).
	vipPrime = 65011
)

// AutoVIP is a pair of auto-allocated addresses.
type AutoVIP struct {
	IPv4 string
	IPv6 string
}

// NeedsAutoVIP reports whether s gets auto-allocated addresses: a
// ServiceEntry host without an address, whose hostname is not a wildcard
// and whose resolution is not NONE (for NONE the proxy passes traffic to
// the original destination, which a made-up address would hide).
func NeedsAutoVIP(s *Service) bool {
	return s.Registry == RegistryServiceEntry && !s.HasAddress() &&
		!strings.HasPrefix(s.Hostname, "*") && s.Resolution != Passthrough
}

// AllocateVIPs returns the auto-allocated addresses of the services that
// NeedsAutoVIP, by hostname. The result depends only on the set of
// "namespace/hostname" keys, not on the order of services nor on time, so
// it is the same after a restart and on every replica: each key hashes
// (FNV-1a 32) to a slot, a taken slot is resolved by double hashing, keys
// are placed in sorted order so collisions resolve the same way every
// time, and slot n gets the n-th address of 240.240.0.1..240.240.255.254
// that ends neither in .0 nor in .255. The IPv6 address is 2001:2::f0f0:X,
// X the same 16 bits in hex (Istio writes the two octets side by side,
// which for third octets above 0 can give two hosts one address; this
// form cannot). Keys beyond the 65,024 addresses get none.
func AllocateVIPs(services []*Service) map[string]AutoVIP {
	type cand struct{ key, host string }
	var cands []cand
	for _, s := range services {
		if NeedsAutoVIP(s) {
			cands = append(cands, cand{s.Namespace + "/" + s.Hostname, s.Hostname})
		}
	}
	if len(cands) == 0 {
		return nil
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].key < cands[j].key })
	taken := make(map[uint32]bool, len(cands))
	out := make(map[string]AutoVIP, len(cands))
	byKey := make(map[string]AutoVIP, len(cands))
	for _, c := range cands {
		if v, ok := byKey[c.key]; ok {
			out[c.host] = v
			continue
		}
		if len(taken) >= vipSlots {
			break
		}
		slot := vipSlot(c.key, taken)
		taken[slot] = true
		v := vipForSlot(slot)
		byKey[c.key] = v
		if _, dup := out[c.host]; !dup {
			out[c.host] = v
		}
	}
	return out
}

// vipSlot finds a free slot for key: its hash modulo vipSlots, else by
// double hashing, else (should the probe sequence cycle) the first free
// slot after the hash.
func vipSlot(key string, taken map[uint32]bool) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	s := h.Sum32()
	if first := s % vipSlots; !taken[first] {
		return first
	}
	step := vipPrime - s%vipPrime
	for i := uint32(1); i <= vipSlots; i++ {
		if n := (s + i*step) % (vipSlots - 1); !taken[n] {
			return n
		}
	}
	for i := uint32(0); i < vipSlots; i++ {
		if n := (s + i) % vipSlots; !taken[n] {
			return n
		}
	}
	panic("model: vipSlot called with every slot taken")
}

// vipForSlot maps slot n (0-based) to the (n+1)-th positive integer x that
// is not a multiple of 255, and x to 240.240.(x/255).(x%255): the fourth
// octet runs 1..254, so no address ends in .0 or .255.
func vipForSlot(slot uint32) AutoVIP {
	n := slot + 1
	x := n + (n-1)/254
	third, fourth := x/255, x%255
	return AutoVIP{
		IPv4: fmt.Sprintf("240.240.%d.%d", third, fourth),
		IPv6: fmt.Sprintf("2001:2::f0f0:%x", third<<8|fourth),
	}
}

// AutoAllocatedVIP returns the auto-allocated addresses of hostname in this
// snapshot (see AllocateVIPs); ok is false when it has none.
func (pc *PushContext) AutoAllocatedVIP(hostname string) (AutoVIP, bool) {
	v, ok := pc.autoVIPs[hostname]
	return v, ok
}

// AutoVIPsFor returns the auto-allocated addresses proxy uses for svc: none
// unless the proxy sets DNS_CAPTURE and DNS_AUTO_ALLOCATE (its agent
// answers DNS with them) and svc NeedsAutoVIP; else the IPv4 one if the
// proxy has an IPv4 address (or none) and the IPv6 one if it has an IPv6
// address, IPv4 first.
func (pc *PushContext) AutoVIPsFor(proxy *Proxy, svc *Service) []string {
	if !proxy.Metadata.DNSCapture || !proxy.Metadata.DNSAutoAllocate || !NeedsAutoVIP(svc) {
		return nil
	}
	vip, ok := pc.AutoAllocatedVIP(svc.Hostname)
	if !ok {
		return nil
	}
	v4, v6 := proxy.VIPFamilies()
	var out []string
	if v4 {
		out = append(out, vip.IPv4)
	}
	if v6 {
		out = append(out, vip.IPv6)
	}
	return out
}

// VIPFamilies returns which auto-allocated VIP families the proxy gets:
// IPv4 if it has an IPv4 address (or no address), IPv6 if it has an IPv6
// address.
func (p *Proxy) VIPFamilies() (v4, v6 bool) {
	for _, ip := range p.IPAddresses {
		if a, err := netip.ParseAddr(ip); err == nil {
			if a.Unmap().Is4() {
				v4 = true
			} else {
				v6 = true
			}
		}
	}
	return v4 || !v6, v6
}
