// Package iptables builds and applies the traffic-capture rules of Istio's
// istio-iptables (the init container of an injected pod): the same flags, the
// same chains (ISTIO_INBOUND, ISTIO_IN_REDIRECT, ISTIO_OUTPUT,
// ISTIO_REDIRECT, ISTIO_OUTPUT_DNS, ISTIO_DIVERT, ISTIO_TPROXY, ISTIO_DROP)
// and the same rule semantics, written as iptables-restore input per IP
// family.
package iptables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Interception modes for inbound traffic.
const (
	ModeRedirect = "REDIRECT"
	ModeTProxy   = "TPROXY"
)

// Chain names, as Istio names them.
const (
	ChainInbound    = "ISTIO_INBOUND"
	ChainInRedirect = "ISTIO_IN_REDIRECT"
	ChainOutput     = "ISTIO_OUTPUT"
	ChainOutputDNS  = "ISTIO_OUTPUT_DNS"
	ChainRedirect   = "ISTIO_REDIRECT"
	ChainDivert     = "ISTIO_DIVERT"
	ChainTProxy     = "ISTIO_TPROXY"
	ChainDrop       = "ISTIO_DROP"
)

// Fixed values Istio does not make configurable.
const (
	// DNSPort is where the agent's DNS proxy listens.
	DNSPort = "15053"
	// OutboundMark marks, in TPROXY mode, Envoy's outbound connections to the
	// pod's own IP so they are not captured again as inbound.
	OutboundMark = "1338"
	// DefaultProxyUID is used when ENVOY_USER does not name a local user.
	DefaultProxyUID = "1337"
	// inboundPassthroughV4/V6 are the source addresses Envoy binds when it
	// forwards inbound traffic to the application.
	inboundPassthroughV4 = "127.0.0.6/32"
	inboundPassthroughV6 = "::6/128"
	loopbackV6           = "::1/128"
)

// Config holds istio-iptables' options; field comments name the flag.
type Config struct {
	ProxyPort                string        // -p --envoy-port
	InboundCapturePort       string        // -z --inbound-capture-port
	InboundTunnelPort        string        // -e --inbound-tunnel-port
	ProxyUID                 string        // -u --proxy-uid (comma-separated)
	ProxyGID                 string        // -g --proxy-gid (comma-separated)
	InboundInterceptionMode  string        // -m --istio-inbound-interception-mode
	InboundTProxyMark        string        // -t --istio-inbound-tproxy-mark
	InboundTProxyRouteTable  string        // -r --istio-inbound-tproxy-route-table
	InboundPortsInclude      string        // -b --istio-inbound-ports
	InboundPortsExclude      string        // -d --istio-local-exclude-ports
	OutboundPortsInclude     string        // -q --istio-outbound-ports
	OutboundPortsExclude     string        // -o --istio-local-outbound-ports-exclude
	OutboundIPRangesInclude  string        // -i --istio-service-cidr
	OutboundIPRangesExclude  string        // -x --istio-service-exclude-cidr
	RerouteVirtualInterfaces string        // -k --kube-virt-interfaces
	ExcludeInterfaces        string        // -c --istio-exclude-interfaces
	OwnerGroupsInclude       string        // ISTIO_OUTBOUND_OWNER_GROUPS
	OwnerGroupsExclude       string        // ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE
	HostIPv4LoopbackCIDR     string        // ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR
	RedirectDNS              bool          // --redirect-dns
	CaptureAllDNS            bool          // --capture-all-dns
	DropInvalid              bool          // --drop-invalid
	DualStack                bool          // --dual-stack
	EnableIPv6               bool          // derived: the pod has an IPv6 address
	DNSServersV4             []string      // derived: /etc/resolv.conf
	DNSServersV6             []string      // derived: /etc/resolv.conf
	ProbePort                uint16        // --iptables-probe-port
	ProbeTimeout             time.Duration // --probe-timeout
}

// DefaultConfig returns Istio's defaults.
func DefaultConfig() Config {
	return Config{
		ProxyPort:               "15001",
		InboundCapturePort:      "15006",
		InboundTunnelPort:       "15008",
		InboundTProxyMark:       "1337",
		InboundTProxyRouteTable: "133",
		OwnerGroupsInclude:      "*",
		HostIPv4LoopbackCIDR:    "127.0.0.1/32",
		ProbePort:               15002,
		ProbeTimeout:            5 * time.Second,
	}
}

// Validate rejects options that would produce broken rules.
func (c *Config) Validate() error {
	for name, v := range map[string]string{
		"envoy-port": c.ProxyPort, "inbound-capture-port": c.InboundCapturePort,
		"inbound-tunnel-port": c.InboundTunnelPort,
	} {
		if err := checkPort(v); err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
	}
	for name, v := range map[string]string{
		"istio-local-exclude-ports": c.InboundPortsExclude, "istio-outbound-ports": c.OutboundPortsInclude,
		"istio-local-outbound-ports-exclude": c.OutboundPortsExclude,
	} {
		for _, p := range split(v) {
			if err := checkPort(p); err != nil {
				return fmt.Errorf("--%s: %w", name, err)
			}
		}
	}
	if c.InboundPortsInclude != "*" {
		for _, p := range split(c.InboundPortsInclude) {
			if err := checkPort(p); err != nil {
				return fmt.Errorf("--istio-inbound-ports: %w", err)
			}
		}
	}
	switch c.InboundInterceptionMode {
	case "", ModeRedirect, ModeTProxy:
	default:
		return fmt.Errorf("--istio-inbound-interception-mode: %q is neither REDIRECT nor TPROXY", c.InboundInterceptionMode)
	}
	if strings.TrimSpace(c.OutboundIPRangesExclude) == "*" {
		return fmt.Errorf("--istio-service-exclude-cidr: the wildcard is not allowed")
	}
	if c.OwnerGroupsInclude != "*" && c.OwnerGroupsExclude != "" {
		return fmt.Errorf("ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE only applies when ISTIO_OUTBOUND_OWNER_GROUPS is \"*\"")
	}
	p, err := netip.ParsePrefix(c.HostIPv4LoopbackCIDR)
	if err != nil || !p.Addr().Is4() || !p.Addr().IsLoopback() {
		return fmt.Errorf("ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR: %q is not an IPv4 loopback CIDR", c.HostIPv4LoopbackCIDR)
	}
	return nil
}

func checkPort(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q is not a port", s)
	}
	return nil
}

// split cuts a comma-separated list, dropping blanks.
func split(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// ipRanges is one family's share of a CIDR list.
type ipRanges struct {
	wildcard bool
	cidrs    []netip.Prefix
	loopback bool
}

// splitRanges separates a CIDR list ("*" for all) into IPv4 and IPv6;
// entries that do not parse are ignored, as Istio ignores them.
func splitRanges(list string) (v4, v6 ipRanges) {
	if strings.TrimSpace(list) == "*" {
		return ipRanges{wildcard: true}, ipRanges{wildcard: true}
	}
	for _, s := range split(list) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		r := &v6
		if p.Addr().Is4() {
			r = &v4
		}
		r.cidrs = append(r.cidrs, p.Masked())
		r.loopback = r.loopback || p.Addr().IsLoopback()
	}
	return v4, v6
}
