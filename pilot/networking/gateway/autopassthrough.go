package gateway

import (
	"log/slog"
	"slices"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
)

// autoPassthrough adds the chains of an AUTO_PASSTHROUGH server (istiod's
// east-west gateway), as istiod builds them: for each service the router
// sees that is not mesh-external and whose hostname one of the server's
// hosts covers, and each of its ports but UDP ones, a chain matching the
// SNI "outbound_.PORT_._.HOST" and Istio's mTLS ALPNs, forwarding with
// tcp_proxy to the SNI-DNAT cluster of that name; then the same for each
// subset of the DestinationRule the router sees ("outbound_.PORT_.SUBSET_.HOST").
// The bytes stay the client sidecar's mTLS: the gateway neither terminates
// nor originates TLS. The namespace part of a host ("ns/*.local") is
// ignored, as istiod's SNI hosts of a server drop it. A name already
// matched on the port (by another server) is skipped.
func (b *chainBuilder) autoPassthrough(s server, push *model.PushContext, log *slog.Logger) {
	hosts := serverHostnames(s)
	n := 0
	for _, svc := range push.ServicesFor(b.proxy) {
		if svc.MeshExternal || !anyCovers(hosts, svc.Hostname) {
			continue
		}
		subsets := append([]string{""}, subsetNames(push.DestinationRuleFor(b.proxy, svc))...)
		for _, port := range svc.Ports {
			if port.Protocol == model.ProtocolUDP {
				continue
			}
			for _, subset := range subsets {
				name := clustername.SNIDNAT(subset, svc.Hostname, port.Port)
				if !b.claim([]string{name}) {
					continue
				}
				tcp, err := listener.TCPProxyFilter(name)
				if err != nil {
					log.Error("auto passthrough chain not built", "cluster", name, "error", err)
					continue
				}
				b.chains = append(b.chains, &listenerv3.FilterChain{
					FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{name}, ApplicationProtocols: authn.IstioALPN},
					Filters:          []*listenerv3.Filter{tcp},
				})
				n++
			}
		}
	}
	if n == 0 {
		log.Debug("auto passthrough server matches no service", "hosts", hosts)
	}
}

// serverHostnames are the hosts of s without their namespace part, each once.
func serverHostnames(s server) []string {
	var out []string
	for _, h := range s.spec.GetHosts() {
		if _, host, ok := strings.Cut(h, "/"); ok {
			h = host
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// anyCovers reports whether one of hosts is hostname or a wildcard covering it.
func anyCovers(hosts []string, hostname string) bool {
	for _, h := range hosts {
		if h == hostname || covers(h, hostname) {
			return true
		}
	}
	return false
}

// subsetNames are the subset names of dr (nil for none).
func subsetNames(dr *model.Config) []string {
	if dr == nil {
		return nil
	}
	var out []string
	rule, _ := dr.Spec.(*networking.DestinationRule)
	for _, s := range rule.GetSubsets() {
		out = append(out, s.GetName())
	}
	return out
}
