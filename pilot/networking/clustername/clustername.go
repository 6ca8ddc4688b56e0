// Package clustername builds and parses Istio's Envoy cluster names, which
// clusters, endpoints, listeners and routes must agree on.
package clustername

import (
	"strconv"
	"strings"
)

// Directions in cluster names.
const (
	Outbound = "outbound"
	Inbound  = "inbound"
)

// Names of the built-in clusters, as Istio names them.
const (
	BlackHole          = "BlackHoleCluster"
	Passthrough        = "PassthroughCluster"
	InboundPassthrough = "InboundPassthroughCluster"
)

// Build returns Istio's cluster name "DIRECTION|PORT|SUBSET|HOST"
// ("outbound|9080|v1|reviews.default.svc.cluster.local", "inbound|9080||").
func Build(direction, subset, host string, port uint32) string {
	return direction + "|" + strconv.FormatUint(uint64(port), 10) + "|" + subset + "|" + host
}

// sniSep separates the parts of an SNI-DNAT cluster name.
const sniSep = "_."

// SNIDNAT returns the name istiod gives the cluster of an AUTO_PASSTHROUGH
// gateway, which is also the SNI a client sidecar sends for the service:
// "outbound_.PORT_.SUBSET_.HOST" ("outbound_.9080_._.reviews.default.svc.cluster.local"
// without a subset, "outbound_.9080_.v1_.reviews.default.svc.cluster.local").
func SNIDNAT(subset, host string, port uint32) string {
	return Outbound + sniSep + strconv.FormatUint(uint64(port), 10) + sniSep + subset + sniSep + host
}

// IsSNIDNAT reports whether name has the form SNIDNAT makes (a cheap
// prefix check; Parse validates the rest).
func IsSNIDNAT(name string) bool {
	return strings.HasPrefix(name, Outbound+sniSep)
}

// Parse splits a name made by Build, or by SNIDNAT (direction outbound).
// ok is false for any other name (including BlackHoleCluster and friends).
func Parse(name string) (direction, subset, host string, port uint32, ok bool) {
	if IsSNIDNAT(name) {
		return parseSNIDNAT(name)
	}
	direction, rest, ok1 := strings.Cut(name, "|")
	portStr, rest, ok2 := strings.Cut(rest, "|")
	subset, host, ok3 := strings.Cut(rest, "|")
	if !ok1 || !ok2 || !ok3 {
		return "", "", "", 0, false
	}
	if direction != Outbound && direction != Inbound {
		return "", "", "", 0, false
	}
	p, ok := parsePort(portStr)
	if !ok {
		return "", "", "", 0, false
	}
	return direction, subset, host, p, true
}

// parseSNIDNAT splits "outbound_.PORT_.SUBSET_.HOST" (SUBSET may be empty).
func parseSNIDNAT(name string) (direction, subset, host string, port uint32, ok bool) {
	rest := name[len(Outbound+sniSep):]
	portStr, rest, ok1 := strings.Cut(rest, sniSep)
	subset, host, ok2 := strings.Cut(rest, sniSep)
	if !ok1 || !ok2 || host == "" {
		return "", "", "", 0, false
	}
	p, ok := parsePort(portStr)
	if !ok {
		return "", "", "", 0, false
	}
	return Outbound, subset, host, p, true
}

func parsePort(s string) (uint32, bool) {
	p, err := strconv.ParseUint(s, 10, 32)
	if err != nil || p == 0 {
		return 0, false
	}
	return uint32(p), true
}
