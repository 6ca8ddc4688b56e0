package iptables

import (
	"strconv"
	"strings"
)

// Rule is one iptables rule: appended to Chain of Table, or inserted at
// Position (1-based) when Position > 0.
type Rule struct {
	Table    string
	Chain    string
	Position int
	Args     []string
}

// Line renders the rule as an iptables-restore line ("-A CHAIN args" or
// "-I CHAIN N args").
func (r Rule) Line() string {
	head := "-A " + r.Chain
	if r.Position > 0 {
		head = "-I " + r.Chain + " " + strconv.Itoa(r.Position)
	}
	return head + " " + strings.Join(r.Args, " ")
}

// Target is the rule's -j argument.
func (r Rule) Target() string {
	for i, a := range r.Args {
		if a == "-j" && i+1 < len(r.Args) {
			return r.Args[i+1]
		}
	}
	return ""
}

// RuleSet is the rules of both IP families, in the order they are applied.
type RuleSet struct {
	V4, V6 []Rule
}

// ipSpecific stands in an argument list for a family-specific address.
const ipSpecific = "\x00IP"

// builder accumulates rules; v6 rules are kept only when IPv6 is enabled.
type builder struct {
	rs   RuleSet
	ipv6 bool
}

func (b *builder) add(v4, v6 bool, table, chain string, pos int, args ...string) {
	if v4 {
		b.rs.V4 = append(b.rs.V4, Rule{Table: table, Chain: chain, Position: pos, Args: args})
	}
	if v6 && b.ipv6 {
		b.rs.V6 = append(b.rs.V6, Rule{Table: table, Chain: chain, Position: pos, Args: args})
	}
}

func (b *builder) both(table, chain string, args ...string) {
	b.add(true, true, table, chain, 0, args...)
}
func (b *builder) v4(table, chain string, args ...string) {
	b.add(true, false, table, chain, 0, args...)
}
func (b *builder) v6(table, chain string, args ...string) {
	b.add(false, true, table, chain, 0, args...)
}

func (b *builder) insert(table, chain string, pos int, args ...string) {
	b.add(true, true, table, chain, pos, args...)
}

// versioned appends a rule to both families with ipSpecific replaced by a4
// or a6.
func (b *builder) versioned(a4, a6, table, chain string, args ...string) {
	b.v4(table, chain, substitute(args, a4)...)
	b.v6(table, chain, substitute(args, a6)...)
}

func substitute(args []string, v string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == ipSpecific {
			a = v
		}
		out[i] = a
	}
	return out
}

// Build computes the capture rules for cfg, in Istio's order.
func Build(cfg Config) RuleSet {
	b := &builder{ipv6: cfg.EnableIPv6}
	tproxy := cfg.InboundInterceptionMode == ModeTProxy
	loop4 := cfg.HostIPv4LoopbackCIDR
	exclude4, exclude6 := splitRanges(cfg.OutboundIPRangesExclude)
	include4, include6 := splitRanges(cfg.OutboundIPRangesInclude)
	redirectDNS := cfg.RedirectDNS && (cfg.CaptureAllDNS || len(cfg.DNSServersV4) > 0 || len(cfg.DNSServersV6) > 0)

	// Interfaces that are never captured, and virtual interfaces whose
	// inbound traffic is treated as outbound.
	for _, nic := range split(cfg.ExcludeInterfaces) {
		b.both("nat", "PREROUTING", "-i", nic, "-j", "RETURN")
		b.both("nat", "OUTPUT", "-o", nic, "-j", "RETURN")
	}
	if tproxy {
		for _, nic := range split(cfg.ExcludeInterfaces) {
			b.both("mangle", "PREROUTING", "-i", nic, "-j", "RETURN")
			b.both("mangle", "OUTPUT", "-o", nic, "-j", "RETURN")
		}
	}
	for _, nic := range split(cfg.RerouteVirtualInterfaces) {
		b.insert("nat", "PREROUTING", 1, "-i", nic, "-j", "RETURN")
	}
	if cfg.DropInvalid {
		b.both("mangle", "PREROUTING", "-m", "conntrack", "--ctstate", "INVALID", "-j", ChainDrop)
		b.both("mangle", ChainDrop, "-j", "DROP")
	}

	b.both("nat", ChainInbound, "-p", "tcp", "--dport", cfg.InboundTunnelPort, "-j", "RETURN")
	b.both("nat", ChainRedirect, "-p", "tcp", "-j", "REDIRECT", "--to-ports", cfg.ProxyPort)
	b.both("nat", ChainInRedirect, "-p", "tcp", "-j", "REDIRECT", "--to-ports", cfg.InboundCapturePort)
	buildInbound(b, cfg, tproxy)

	b.both("nat", "OUTPUT", "-j", ChainOutput)
	for _, port := range split(cfg.OutboundPortsExclude) {
		b.both("nat", ChainOutput, "-p", "tcp", "--dport", port, "-j", "RETURN")
		b.both("nat", ChainOutput, "-p", "udp", "--dport", port, "-j", "RETURN")
	}
	b.versioned(inboundPassthroughV4, inboundPassthroughV6, "nat", ChainOutput, "-o", "lo", "-s", ipSpecific, "-j", "RETURN")
	loopbackIncluded := include4.loopback || include6.loopback
	buildOwner(b, cfg, "--uid-owner", cfg.ProxyUID, redirectDNS, loopbackIncluded)
	buildOwner(b, cfg, "--gid-owner", cfg.ProxyGID, redirectDNS, loopbackIncluded)
	buildOwnerGroups(b, cfg)
	if redirectDNS {
		buildDNS(b, cfg)
	}

	// Envoy-aware applications and container-to-container traffic use
	// localhost; exclusions come before inclusions.
	b.versioned(loop4, loopbackV6, "nat", ChainOutput, "-d", ipSpecific, "-j", "RETURN")
	for _, p := range exclude4.cidrs {
		b.v4("nat", ChainOutput, "-d", p.String(), "-j", "RETURN")
	}
	for _, p := range exclude6.cidrs {
		b.v6("nat", ChainOutput, "-d", p.String(), "-j", "RETURN")
	}
	for _, port := range split(cfg.OutboundPortsInclude) {
		b.both("nat", ChainOutput, "-p", "tcp", "--dport", port, "-j", ChainRedirect)
	}
	buildOutboundInclude(b, cfg, include4, true)
	buildOutboundInclude(b, cfg, include6, false)
	if tproxy {
		buildTProxyOutput(b, cfg)
	}
	return b.rs
}

// buildInbound captures inbound ports: NAT REDIRECT to the inbound capture
// port, or in TPROXY mode mangle rules that mark and divert.
func buildInbound(b *builder, cfg Config, tproxy bool) {
	if cfg.InboundPortsInclude == "" {
		return
	}
	table := "nat"
	if tproxy {
		table = "mangle"
		b.both("mangle", ChainDivert, "-j", "MARK", "--set-mark", cfg.InboundTProxyMark)
		b.both("mangle", ChainDivert, "-j", "ACCEPT")
		b.versioned(cfg.HostIPv4LoopbackCIDR, loopbackV6, "mangle", ChainTProxy, "!", "-d", ipSpecific,
			"-p", "tcp", "-j", "TPROXY", "--tproxy-mark", cfg.InboundTProxyMark+"/0xffffffff", "--on-port", cfg.InboundCapturePort)
	}
	b.both(table, "PREROUTING", "-p", "tcp", "-j", ChainInbound)
	if cfg.InboundPortsInclude == "*" {
		for _, port := range split(cfg.InboundPortsExclude) {
			b.both(table, ChainInbound, "-p", "tcp", "--dport", port, "-j", "RETURN")
		}
		if tproxy {
			b.both("mangle", ChainInbound, "-p", "tcp", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", ChainDivert)
			b.both("mangle", ChainInbound, "-p", "tcp", "-j", ChainTProxy)
		} else {
			b.both("nat", ChainInbound, "-p", "tcp", "-j", ChainInRedirect)
		}
		return
	}
	for _, port := range split(cfg.InboundPortsInclude) {
		if tproxy {
			b.both("mangle", ChainInbound, "-p", "tcp", "--dport", port, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", ChainDivert)
			b.both("mangle", ChainInbound, "-p", "tcp", "--dport", port, "-j", ChainTProxy)
		} else {
			b.both("nat", ChainInbound, "-p", "tcp", "--dport", port, "-j", ChainInRedirect)
		}
	}
}

// buildOwner writes, per proxy uid or gid, the rules that send the proxy's
// own calls to the pod (through a service VIP) back to the inbound
// listener, leave the application's calls to itself alone, and never
// capture the proxy's own traffic.
func buildOwner(b *builder, cfg Config, match, ids string, redirectDNS, loopbackIncluded bool) {
	for _, id := range split(ids) {
		if redirectDNS && match == "--uid-owner" {
			b.versioned(cfg.HostIPv4LoopbackCIDR, loopbackV6, "nat", ChainOutput, "-o", "lo", "!", "-d", ipSpecific,
				"-p", "tcp", "-m", "multiport", "!", "--dports", "53,"+cfg.InboundTunnelPort,
				"-m", "owner", match, id, "-j", ChainInRedirect)
		} else {
			b.versioned(cfg.HostIPv4LoopbackCIDR, loopbackV6, "nat", ChainOutput, "-o", "lo", "!", "-d", ipSpecific,
				"-p", "tcp", "!", "--dport", cfg.InboundTunnelPort,
				"-m", "owner", match, id, "-j", ChainInRedirect)
		}
		if !loopbackIncluded {
			if redirectDNS {
				b.both("nat", ChainOutput, "-o", "lo", "-p", "tcp", "!", "--dport", "53", "-m", "owner", "!", match, id, "-j", "RETURN")
			} else {
				b.both("nat", ChainOutput, "-o", "lo", "-m", "owner", "!", match, id, "-j", "RETURN")
			}
		}
		b.both("nat", ChainOutput, "-m", "owner", match, id, "-j", "RETURN")
	}
}

// buildOwnerGroups limits capture to some groups
// (ISTIO_OUTBOUND_OWNER_GROUPS) or leaves some out
// (ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE).
func buildOwnerGroups(b *builder, cfg Config) {
	if strings.TrimSpace(cfg.OwnerGroupsInclude) == "*" || cfg.OwnerGroupsInclude == "" {
		for _, g := range split(cfg.OwnerGroupsExclude) {
			b.both("nat", ChainOutput, "-m", "owner", "--gid-owner", g, "-j", "RETURN")
		}
		return
	}
	var args []string
	for _, g := range split(cfg.OwnerGroupsInclude) {
		args = append(args, "-m", "owner", "!", "--gid-owner", g)
	}
	b.both("nat", ChainOutput, append(args, "-j", "RETURN")...)
}

// buildOutboundInclude redirects the included outbound ranges ("*" for
// all) to Envoy, also for traffic entering from virtual interfaces.
func buildOutboundInclude(b *builder, cfg Config, r ipRanges, v4 bool) {
	add := func(table, chain string, pos int, args ...string) { b.add(v4, !v4, table, chain, pos, args...) }
	if r.wildcard {
		add("nat", ChainOutput, 0, "-j", ChainRedirect)
		for _, nic := range split(cfg.RerouteVirtualInterfaces) {
			add("nat", "PREROUTING", 1, "-i", nic, "-j", ChainRedirect)
		}
		return
	}
	for _, p := range r.cidrs {
		for _, nic := range split(cfg.RerouteVirtualInterfaces) {
			add("nat", "PREROUTING", 1, "-i", nic, "-d", p.String(), "-j", ChainRedirect)
		}
		add("nat", ChainOutput, 0, "-d", p.String(), "-j", ChainRedirect)
	}
}

// buildTProxyOutput keeps marks consistent in TPROXY mode: the original
// source mark is saved and restored per connection, and Envoy's calls to
// the pod's own IP are marked so they are not captured again.
func buildTProxyOutput(b *builder, cfg Config) {
	mark := cfg.InboundTProxyMark
	b.both("mangle", "PREROUTING", "-p", "tcp", "-m", "mark", "--mark", mark, "-j", "CONNMARK", "--save-mark")
	b.both("mangle", "OUTPUT", "-p", "tcp", "-o", "lo", "-m", "mark", "--mark", mark, "-j", "RETURN")
	for _, m := range []struct{ match, ids string }{{"--uid-owner", cfg.ProxyUID}, {"--gid-owner", cfg.ProxyGID}} {
		for _, id := range split(m.ids) {
			b.versioned(cfg.HostIPv4LoopbackCIDR, loopbackV6, "mangle", "OUTPUT", "!", "-d", ipSpecific, "-p", "tcp", "-o", "lo",
				"-m", "owner", m.match, id, "-j", "MARK", "--set-mark", OutboundMark)
		}
	}
	b.both("mangle", "OUTPUT", "-p", "tcp", "-m", "connmark", "--mark", mark, "-j", "CONNMARK", "--restore-mark")
	b.insert("mangle", ChainInbound, 1, "-p", "tcp", "-m", "mark", "--mark", mark, "-j", "RETURN")
	b.add(true, false, "mangle", ChainInbound, 2, "-p", "tcp", "-s", inboundPassthroughV4, "-i", "lo", "-j", "RETURN")
	b.add(false, true, "mangle", ChainInbound, 2, "-p", "tcp", "-s", inboundPassthroughV6, "-i", "lo", "-j", "RETURN")
	b.insert("mangle", ChainInbound, 3, "-p", "tcp", "-i", "lo", "-m", "mark", "!", "--mark", OutboundMark, "-j", "RETURN")
}
