package iptables

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"strings"
)

// LocalIP returns the pod's address as Istio picks it: the first address
// that is neither loopback nor link-local; with dualStack an IPv6 address
// wins when there is one. ipv6 reports whether the choice is IPv6.
func LocalIP(dualStack bool) (ip netip.Addr, ipv6 bool, err error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("list local addresses: %w", err)
	}
	var first netip.Addr
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
			continue
		}
		if !dualStack {
			return ip, ip.Is6(), nil
		}
		if ip.Is6() {
			return ip, true, nil
		}
		if !first.IsValid() {
			first = ip
		}
	}
	if first.IsValid() {
		return first, false, nil
	}
	return netip.Addr{}, false, fmt.Errorf("no usable local IP address")
}

// ProxyUID resolves the proxy's uid when -u is not given: the uid of the
// user named by ENVOY_USER (default istio-proxy), else DefaultProxyUID.
func ProxyUID(getenv func(string) string) string {
	name := getenv("ENVOY_USER")
	if name == "" {
		name = "istio-proxy"
	}
	if u, err := user.Lookup(name); err == nil {
		return u.Uid
	}
	return DefaultProxyUID
}

// ResolvConfServers returns the nameservers of a resolv.conf file split by
// family.
func ResolvConfServers(path string) (v4, v6 []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read DNS servers: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		ip, err := netip.ParseAddr(fields[1])
		if err != nil {
			continue
		}
		if ip.Is4() || ip.Is4In6() {
			v4 = append(v4, ip.Unmap().String())
		} else {
			v6 = append(v6, ip.String())
		}
	}
	if err := s.Err(); err != nil {
		return nil, nil, fmt.Errorf("read DNS servers from %s: %w", path, err)
	}
	return v4, v6, nil
}
