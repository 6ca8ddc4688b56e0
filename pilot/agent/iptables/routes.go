package iptables

import (
	"context"
	"fmt"
	"strings"
)

// ConfigureRoutes does what the rules need besides iptables: with IPv6 the
// ::6 address on lo (Envoy's inbound passthrough source; IPv6 loopback is a
// single address), and in TPROXY mode a policy route that delivers marked
// packets locally. It runs `ip` (iproute2) and is idempotent.
func ConfigureRoutes(ctx context.Context, r Runner, cfg Config) error {
	if cfg.EnableIPv6 {
		if _, err := r.Run(ctx, "", "ip", "-6", "addr", "add", "::6/128", "dev", "lo"); err != nil && !exists(err) {
			return fmt.Errorf("add ::6 to lo: %w", err)
		}
	}
	if cfg.InboundInterceptionMode != ModeTProxy {
		return nil
	}
	families := []string{"-4"}
	if cfg.EnableIPv6 {
		families = append(families, "-6")
	}
	for _, f := range families {
		rule := []string{"rule", "del", "fwmark", cfg.InboundTProxyMark, "lookup", cfg.InboundTProxyRouteTable}
		for i := 0; i < 16; i++ { // one copy only, even after earlier runs
			if _, err := r.Run(ctx, "", "ip", append([]string{f}, rule...)...); err != nil {
				break
			}
		}
		rule[1] = "add"
		if _, err := r.Run(ctx, "", "ip", append([]string{f}, rule...)...); err != nil {
			return fmt.Errorf("add TPROXY policy rule: %w", err)
		}
		_, err := r.Run(ctx, "", "ip", f, "route", "replace", "local", "default", "dev", "lo", "table", cfg.InboundTProxyRouteTable)
		if err != nil {
			return fmt.Errorf("add TPROXY local route: %w", err)
		}
	}
	return nil
}

// exists reports whether ip failed only because the address or route is
// already there.
func exists(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "file exists") || strings.Contains(msg, "already assigned")
}
