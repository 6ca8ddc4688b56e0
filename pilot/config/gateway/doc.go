// Package gateway is the Kubernetes Gateway API as one more config source:
// GatewayClass, Gateway, HTTPRoute and ReferenceGrant (v1) are translated
// into the Istio Gateway and VirtualService configs istiod would build from
// them, so the existing gateway generators produce their listeners, routes
// and clusters, and the status each object should carry is computed next to
// that translation (Translate). The Controller watches those kinds on a
// cluster and, as leader, writes the status when it changed.
package gateway
