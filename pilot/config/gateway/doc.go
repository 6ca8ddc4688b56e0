// Package gateway is the Kubernetes Gateway API as one more config source:
// GatewayClass, Gateway, HTTPRoute, GRPCRoute, TLSRoute, TCPRoute and
// ReferenceGrant (v1) are translated into the Istio Gateway and
// VirtualService configs istiod would build from them, so the existing
// gateway generators produce their listeners, routes and clusters, and the
// status each object should carry (UDPRoute's included: not accepted) is
// computed next to that translation (Translate). Attachment and status serve
// every route kind through one description of a route (attach.go); each
// kind's rules are translated in its own file. The Controller watches those
// kinds on a cluster and, as leader, writes the status when it changed.
package gateway
