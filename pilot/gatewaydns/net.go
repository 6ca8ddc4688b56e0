package gatewaydns

import (
	"context"
	"net"
	"net/netip"
)

// netResolver is the system resolver (/etc/hosts, then DNS).
type netResolver struct{ r net.Resolver }

func (n *netResolver) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return n.r.LookupNetIP(ctx, "ip", host)
}
