package iptables

// buildDNS redirects the application's DNS (to the resolv.conf servers, or
// to any server with CaptureAllDNS) to the agent on DNSPort, and splits DNS
// conntrack into two zones: zone 1 for the agent's calls to upstream
// resolvers and their answers, zone 2 for applications' queries and the
// agent's answers to them, so the two UDP flows never collide.
func buildDNS(b *builder, cfg Config) {
	all := cfg.CaptureAllDNS
	b.both("raw", "OUTPUT", "-j", ChainOutputDNS)
	if all || len(cfg.DNSServersV4) > 0 {
		b.v4("nat", ChainOutput, "-j", ChainOutputDNS)
	}
	if all || len(cfg.DNSServersV6) > 0 {
		b.v6("nat", ChainOutput, "-j", ChainOutputDNS)
	}
	for _, proto := range []string{"tcp", "udp"} {
		to := "--to-ports"
		if proto == "udp" {
			to = "--to-port" // Istio's spelling; iptables accepts both
		}
		if all {
			b.both("nat", ChainOutputDNS, "-p", proto, "--dport", "53", "-j", "REDIRECT", to, DNSPort)
			continue
		}
		for _, s := range cfg.DNSServersV4 {
			b.v4("nat", ChainOutputDNS, "-p", proto, "--dport", "53", "-d", s+"/32", "-j", "REDIRECT", to, DNSPort)
		}
		for _, s := range cfg.DNSServersV6 {
			b.v6("nat", ChainOutputDNS, "-p", proto, "--dport", "53", "-d", s+"/128", "-j", "REDIRECT", to, DNSPort)
		}
	}

	for _, m := range []struct{ match, ids string }{{"--uid-owner", cfg.ProxyUID}, {"--gid-owner", cfg.ProxyGID}} {
		for _, id := range split(m.ids) {
			b.both("raw", ChainOutputDNS, "-p", "udp", "--dport", "53", "-m", "owner", m.match, id, "-j", "CT", "--zone", "1")
			b.both("raw", ChainOutputDNS, "-p", "udp", "--sport", DNSPort, "-m", "owner", m.match, id, "-j", "CT", "--zone", "2")
		}
	}
	if all {
		b.both("raw", "PREROUTING", "-j", ChainInbound)
		b.both("raw", ChainOutputDNS, "-p", "udp", "--dport", "53", "-j", "CT", "--zone", "2")
		b.both("raw", ChainInbound, "-p", "udp", "--sport", "53", "-j", "CT", "--zone", "1")
		return
	}
	if len(cfg.DNSServersV4) > 0 {
		b.v4("raw", "PREROUTING", "-j", ChainInbound)
	}
	for _, s := range cfg.DNSServersV4 {
		b.v4("raw", ChainOutputDNS, "-p", "udp", "--dport", "53", "-d", s+"/32", "-j", "CT", "--zone", "2")
		b.v4("raw", ChainInbound, "-p", "udp", "--sport", "53", "-s", s+"/32", "-j", "CT", "--zone", "1")
	}
	if len(cfg.DNSServersV6) > 0 {
		b.v6("raw", "PREROUTING", "-j", ChainInbound)
	}
	for _, s := range cfg.DNSServersV6 {
		b.v6("raw", ChainOutputDNS, "-p", "udp", "--dport", "53", "-d", s+"/128", "-j", "CT", "--zone", "2")
		b.v6("raw", ChainInbound, "-p", "udp", "--sport", "53", "-s", s+"/128", "-j", "CT", "--zone", "1")
	}
}
