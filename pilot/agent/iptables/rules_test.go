package iptables

import (
	"slices"
	"strings"
	"testing"
)

// injection is the configuration of Istio's sidecar injection template.
func injection() Config {
	c := DefaultConfig()
	c.ProxyUID, c.ProxyGID = "1337", "1337"
	c.InboundInterceptionMode = ModeRedirect
	c.OutboundIPRangesInclude = "*"
	c.InboundPortsInclude = "*"
	c.InboundPortsExclude = "15090,15021,15020"
	return c
}

func TestBuildInjectionDefaults(t *testing.T) {
	rs := Build(injection())
	want := `* nat
-N ISTIO_INBOUND
-N ISTIO_REDIRECT
-N ISTIO_IN_REDIRECT
-N ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A ISTIO_INBOUND -p tcp --dport 15090 -j RETURN
-A ISTIO_INBOUND -p tcp --dport 15021 -j RETURN
-A ISTIO_INBOUND -p tcp --dport 15020 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A OUTPUT -j ISTIO_OUTPUT
-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN
-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
COMMIT
`
	if got := Restore(rs.V4); got != want {
		t.Errorf("IPv4 restore input:\n%s\nwant:\n%s", got, want)
	}
	if len(rs.V6) != 0 {
		t.Errorf("IPv6 rules without IPv6: %v", rs.V6)
	}
}

func TestBuildIPv6UsesFamilyAddresses(t *testing.T) {
	c := injection()
	c.EnableIPv6 = true
	c.OutboundIPRangesExclude = "10.0.0.0/8,fd00::/8,not-a-cidr"
	rs := Build(c)
	v6 := Restore(rs.V6)
	for _, l := range []string{
		"-A ISTIO_OUTPUT -o lo -s ::6/128 -j RETURN",
		"-A ISTIO_OUTPUT -o lo ! -d ::1/128 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT",
		"-A ISTIO_OUTPUT -d ::1/128 -j RETURN",
		"-A ISTIO_OUTPUT -d fd00::/8 -j RETURN",
	} {
		if !strings.Contains(v6, l+"\n") {
			t.Errorf("IPv6 rules lack %q:\n%s", l, v6)
		}
	}
	v4 := Restore(rs.V4)
	if strings.Contains(v4, "fd00::") || strings.Contains(v6, "10.0.0.0/8") {
		t.Errorf("exclusions crossed families:\nv4:\n%s\nv6:\n%s", v4, v6)
	}
	if !strings.Contains(v4, "-A ISTIO_OUTPUT -d 10.0.0.0/8 -j RETURN\n-A ISTIO_OUTPUT -j ISTIO_REDIRECT\n") {
		t.Errorf("IPv4 exclusion must precede the catch-all redirect:\n%s", v4)
	}
}

func TestBuildPortsAndRanges(t *testing.T) {
	c := injection()
	c.InboundPortsInclude = "8080,9090"
	c.OutboundIPRangesInclude = "10.96.0.0/12"
	c.OutboundPortsInclude = "3306"
	c.OutboundPortsExclude = "7777"
	c.RerouteVirtualInterfaces = "k0"
	c.ExcludeInterfaces = "eth9"
	got := lines(Build(c).V4)
	wantInOrder := []string{
		"-A PREROUTING -i eth9 -j RETURN",
		"-A OUTPUT -o eth9 -j RETURN",
		"-I PREROUTING 1 -i k0 -j RETURN",
		"-A ISTIO_INBOUND -p tcp --dport 8080 -j ISTIO_IN_REDIRECT",
		"-A ISTIO_INBOUND -p tcp --dport 9090 -j ISTIO_IN_REDIRECT",
		"-A OUTPUT -j ISTIO_OUTPUT",
		"-A ISTIO_OUTPUT -p tcp --dport 7777 -j RETURN",
		"-A ISTIO_OUTPUT -p udp --dport 7777 -j RETURN",
		"-A ISTIO_OUTPUT -p tcp --dport 3306 -j ISTIO_REDIRECT",
		"-I PREROUTING 1 -i k0 -d 10.96.0.0/12 -j ISTIO_REDIRECT",
		"-A ISTIO_OUTPUT -d 10.96.0.0/12 -j ISTIO_REDIRECT",
	}
	assertOrdered(t, got, wantInOrder)
	if slices.Contains(got, "-A ISTIO_OUTPUT -j ISTIO_REDIRECT") {
		t.Errorf("a CIDR list must not redirect everything:\n%s", strings.Join(got, "\n"))
	}
}

func TestBuildEmptyCaptureNothing(t *testing.T) {
	c := DefaultConfig()
	c.ProxyUID, c.ProxyGID = "1337", "1337"
	for _, l := range lines(Build(c).V4) {
		if strings.Contains(l, "ISTIO_IN_REDIRECT") && strings.HasPrefix(l, "-A ISTIO_INBOUND") ||
			l == "-A ISTIO_OUTPUT -j ISTIO_REDIRECT" || strings.HasPrefix(l, "-A PREROUTING") {
			t.Errorf("empty -b and -i must capture nothing, got %q", l)
		}
	}
}

func TestBuildTProxy(t *testing.T) {
	c := injection()
	c.InboundInterceptionMode = ModeTProxy
	c.EnableIPv6 = true
	rs := Build(c)
	got := lines(rs.V4)
	assertOrdered(t, got, []string{
		"-A ISTIO_DIVERT -j MARK --set-mark 1337",
		"-A ISTIO_DIVERT -j ACCEPT",
		"-A ISTIO_TPROXY ! -d 127.0.0.1/32 -p tcp -j TPROXY --tproxy-mark 1337/0xffffffff --on-port 15006",
		"-A PREROUTING -p tcp -j ISTIO_INBOUND",
		"-A ISTIO_INBOUND -p tcp --dport 15090 -j RETURN",
		"-A ISTIO_INBOUND -p tcp -m conntrack --ctstate RELATED,ESTABLISHED -j ISTIO_DIVERT",
		"-A ISTIO_INBOUND -p tcp -j ISTIO_TPROXY",
		"-A PREROUTING -p tcp -m mark --mark 1337 -j CONNMARK --save-mark",
		"-A OUTPUT -p tcp -o lo -m mark --mark 1337 -j RETURN",
		"-A OUTPUT ! -d 127.0.0.1/32 -p tcp -o lo -m owner --uid-owner 1337 -j MARK --set-mark 1338",
		"-A OUTPUT ! -d 127.0.0.1/32 -p tcp -o lo -m owner --gid-owner 1337 -j MARK --set-mark 1338",
		"-A OUTPUT -p tcp -m connmark --mark 1337 -j CONNMARK --restore-mark",
		"-I ISTIO_INBOUND 1 -p tcp -m mark --mark 1337 -j RETURN",
		"-I ISTIO_INBOUND 2 -p tcp -s 127.0.0.6/32 -i lo -j RETURN",
		"-I ISTIO_INBOUND 3 -p tcp -i lo -m mark ! --mark 1338 -j RETURN",
	})
	restore := Restore(rs.V4)
	if !strings.HasPrefix(restore, "* mangle\n-N ISTIO_DIVERT\n-N ISTIO_TPROXY\n-N ISTIO_INBOUND\n") {
		t.Errorf("mangle must come first and create its chains:\n%s", restore)
	}
	if !slices.Contains(lines(rs.V6), "-I ISTIO_INBOUND 2 -p tcp -s ::6/128 -i lo -j RETURN") {
		t.Errorf("IPv6 TPROXY lacks the ::6 passthrough exception:\n%s", Restore(rs.V6))
	}
}

func TestBuildDNS(t *testing.T) {
	c := injection()
	c.RedirectDNS = true
	c.ProxyUID, c.ProxyGID = "3,4", "1"
	c.DNSServersV4 = []string{"10.96.0.10"}
	rs := Build(c)
	nat := lines(rs.V4)
	assertOrdered(t, nat, []string{
		"-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp -m multiport ! --dports 53,15008 -m owner --uid-owner 3 -j ISTIO_IN_REDIRECT",
		"-A ISTIO_OUTPUT -o lo -p tcp ! --dport 53 -m owner ! --uid-owner 3 -j RETURN",
		"-A ISTIO_OUTPUT -m owner --uid-owner 3 -j RETURN",
		"-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp -m multiport ! --dports 53,15008 -m owner --uid-owner 4 -j ISTIO_IN_REDIRECT",
		"-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --gid-owner 1 -j ISTIO_IN_REDIRECT",
		"-A ISTIO_OUTPUT -o lo -p tcp ! --dport 53 -m owner ! --gid-owner 1 -j RETURN",
		"-A OUTPUT -j ISTIO_OUTPUT_DNS",
		"-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS",
		"-A ISTIO_OUTPUT_DNS -p tcp --dport 53 -d 10.96.0.10/32 -j REDIRECT --to-ports 15053",
		"-A ISTIO_OUTPUT_DNS -p udp --dport 53 -d 10.96.0.10/32 -j REDIRECT --to-port 15053",
		"-A ISTIO_OUTPUT_DNS -p udp --dport 53 -m owner --uid-owner 3 -j CT --zone 1",
		"-A ISTIO_OUTPUT_DNS -p udp --sport 15053 -m owner --uid-owner 3 -j CT --zone 2",
		"-A ISTIO_OUTPUT_DNS -p udp --dport 53 -m owner --gid-owner 1 -j CT --zone 1",
		"-A PREROUTING -j ISTIO_INBOUND",
		"-A ISTIO_OUTPUT_DNS -p udp --dport 53 -d 10.96.0.10/32 -j CT --zone 2",
		"-A ISTIO_INBOUND -p udp --sport 53 -s 10.96.0.10/32 -j CT --zone 1",
		"-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN",
	})
	restore := Restore(rs.V4)
	if !strings.Contains(restore, "* raw\n-N ISTIO_OUTPUT_DNS\n-N ISTIO_INBOUND\n") {
		t.Errorf("raw table must create its chains:\n%s", restore)
	}

	// No servers and no capture-all: Istio disables DNS capture.
	c.DNSServersV4 = nil
	if r := Restore(Build(c).V4); strings.Contains(r, "15053") {
		t.Errorf("DNS captured without servers:\n%s", r)
	}
	c.CaptureAllDNS = true
	if r := Restore(Build(c).V4); !strings.Contains(r, "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j REDIRECT --to-port 15053\n") {
		t.Errorf("capture-all-dns does not capture all port 53:\n%s", r)
	}
}

func TestBuildOwnerGroups(t *testing.T) {
	c := injection()
	c.OwnerGroupsInclude = "java,1234"
	if !slices.Contains(lines(Build(c).V4), "-A ISTIO_OUTPUT -m owner ! --gid-owner java -m owner ! --gid-owner 1234 -j RETURN") {
		t.Errorf("owner-group inclusion missing:\n%s", Restore(Build(c).V4))
	}
	c.OwnerGroupsInclude, c.OwnerGroupsExclude = "*", "888"
	if !slices.Contains(lines(Build(c).V4), "-A ISTIO_OUTPUT -m owner --gid-owner 888 -j RETURN") {
		t.Errorf("owner-group exclusion missing:\n%s", Restore(Build(c).V4))
	}
}

func TestBuildDropInvalid(t *testing.T) {
	c := injection()
	c.DropInvalid = true
	assertOrdered(t, lines(Build(c).V4), []string{
		"-A PREROUTING -m conntrack --ctstate INVALID -j ISTIO_DROP",
		"-A ISTIO_DROP -j DROP",
	})
}

func TestValidate(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"port":          func(c *Config) { c.ProxyPort = "0" },
		"exclude port":  func(c *Config) { c.InboundPortsExclude = "80,http" },
		"mode":          func(c *Config) { c.InboundInterceptionMode = "NAT" },
		"exclude all":   func(c *Config) { c.OutboundIPRangesExclude = "*" },
		"loopback cidr": func(c *Config) { c.HostIPv4LoopbackCIDR = "10.0.0.1/32" },
		"groups":        func(c *Config) { c.OwnerGroupsInclude, c.OwnerGroupsExclude = "a", "b" },
	} {
		c := injection()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
	c := injection()
	if err := c.Validate(); err != nil {
		t.Errorf("injection config rejected: %v", err)
	}
}

func lines(rules []Rule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.Line()
	}
	return out
}

// assertOrdered checks that want appear in got in this order.
func assertOrdered(t *testing.T, got, want []string) {
	t.Helper()
	i := 0
	for _, l := range got {
		if i < len(want) && l == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("rule %q missing or out of order in:\n%s", want[i], strings.Join(got, "\n"))
	}
}
