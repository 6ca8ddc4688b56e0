package inject

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// validateAnnotations rejects malformed traffic annotations, which would
// otherwise break the iptables setup at pod start.
func validateAnnotations(a map[string]string) error {
	checks := []struct {
		name string
		fn   func(string) error
	}{
		{"traffic.sidecar.istio.io/includeOutboundIPRanges", cidrList(true)},
		{"traffic.sidecar.istio.io/excludeOutboundIPRanges", cidrList(false)},
		{"traffic.sidecar.istio.io/includeInboundPorts", portList(true)},
		{"traffic.sidecar.istio.io/excludeInboundPorts", portList(false)},
		{"traffic.sidecar.istio.io/includeOutboundPorts", portList(false)},
		{"traffic.sidecar.istio.io/excludeOutboundPorts", portList(false)},
		{"status.sidecar.istio.io/port", port},
		{interceptionModeAnnotation, func(v string) error {
			switch v {
			case "REDIRECT", "TPROXY", "NONE":
				return nil
			}
			return fmt.Errorf("%q is not REDIRECT, TPROXY or NONE", v)
		}},
	}
	for _, c := range checks {
		if v, ok := a[c.name]; ok {
			if err := c.fn(v); err != nil {
				return fmt.Errorf("annotation %s: %w", c.name, err)
			}
		}
	}
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func cidrList(wildcard bool) func(string) error {
	return func(v string) error {
		if wildcard && strings.TrimSpace(v) == "*" {
			return nil
		}
		for _, s := range splitList(v) {
			if _, err := netip.ParsePrefix(s); err != nil {
				return fmt.Errorf("%q: %w", s, err)
			}
		}
		return nil
	}
}

func portList(wildcard bool) func(string) error {
	return func(v string) error {
		if wildcard && strings.TrimSpace(v) == "*" {
			return nil
		}
		for _, s := range splitList(v) {
			if err := port(s); err != nil {
				return err
			}
		}
		return nil
	}
}

func port(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q is not a port", s)
	}
	return nil
}
