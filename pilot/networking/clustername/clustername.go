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

// Parse splits a name made by Build. ok is false for any other name
// (including BlackHoleCluster and friends).
func Parse(name string) (direction, subset, host string, port uint32, ok bool) {
	direction, rest, ok1 := strings.Cut(name, "|")
	portStr, rest, ok2 := strings.Cut(rest, "|")
	subset, host, ok3 := strings.Cut(rest, "|")
	if !ok1 || !ok2 || !ok3 {
		return "", "", "", 0, false
	}
	if direction != Outbound && direction != Inbound {
		return "", "", "", 0, false
	}
	p, err := strconv.ParseUint(portStr, 10, 32)
	if err != nil || p == 0 {
		return "", "", "", 0, false
	}
	return direction, subset, host, uint32(p), true
}
