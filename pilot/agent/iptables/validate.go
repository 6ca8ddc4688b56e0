package iptables

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// Validate checks that the rules capture traffic, as Istio's
// --run-validation does: it listens on loopback at the outbound and inbound
// capture ports and connects from there, as the current user, to 127.0.0.6 (::6 for
// IPv6) on the probe port, where nothing listens; the rules must deliver
// the connection to one of the listeners with the probe port as its
// original destination. Run it as the proxy's uid (the validation
// container's) or the rules rightly leave the probe alone.
func Validate(ctx context.Context, log *slog.Logger, cfg Config) error {
	listenIP, target := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.6")
	if cfg.EnableIPv6 {
		listenIP, target = netip.IPv6Loopback(), netip.MustParseAddr("::6")
	}
	// From the loopback address: a source of ::6 (the kernel's choice for a
	// destination of ::6) is the inbound passthrough, never captured.
	dialer := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(listenIP, 0))}
	ctx, cancel := context.WithTimeout(ctx, cfg.ProbeTimeout)
	defer cancel()
	done := make(chan struct{}, 1)
	var lc net.ListenConfig
	listening := 0
	for _, p := range []string{cfg.ProxyPort, cfg.InboundCapturePort} {
		addr := net.JoinHostPort(listenIP.String(), p)
		l, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			log.Warn("validation listener failed", "address", addr, "error", err)
			continue
		}
		listening++
		defer l.Close()
		go acceptProbes(l.(*net.TCPListener), cfg.ProbePort, done, log)
	}
	if listening == 0 {
		return errors.New("validation: no listener could be opened")
	}
	probe := netip.AddrPortFrom(target, cfg.ProbePort).String()
	tick := time.NewTicker(time.Second) // Istio's retry interval
	defer tick.Stop()
	for {
		if c, err := dialer.DialContext(ctx, "tcp", probe); err == nil {
			c.Close()
		}
		select {
		case <-done:
			log.Info("validation passed, iptables rules established")
			return nil
		case <-ctx.Done():
			return fmt.Errorf("iptables validation: no connection to %s was captured within %s", probe, cfg.ProbeTimeout)
		case <-tick.C:
		}
	}
}

func acceptProbes(l *net.TCPListener, probePort uint16, done chan<- struct{}, log *slog.Logger) {
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			return
		}
		dst, err := OriginalDst(c)
		_, _ = c.Write([]byte(strconv.Itoa(int(dst.Port()))))
		c.Close()
		if err != nil {
			log.Warn("validation probe without original destination", "error", err)
			continue
		}
		if dst.Port() == probePort {
			select {
			case done <- struct{}{}:
			default:
			}
			return
		}
	}
}
