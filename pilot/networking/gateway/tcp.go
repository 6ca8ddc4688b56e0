package gateway

import (
	"fmt"
	"log/slog"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// tcp adds the chain of a TCP server (kindTCP: no match, taking the port's
// unmatched connections) or of a TLS-terminating TCP server (kindTLSTCP:
// matched by the server's hosts as SNI). The chain forwards to the first
// tcp route that applies (see tcpRoute); with none, the server is not
// served, as in Istio.
func (b *chainBuilder) tcp(s server, push *model.PushContext, log *slog.Logger) {
	k := serverKind(s.spec)
	if k == kindTCP && b.plain != nil {
		log.Warn("gateway server not served: another server already takes the port's unmatched connections")
		return
	}
	f, err := b.tcpRoute(s, push, log)
	if err != nil {
		log.Warn("gateway server not served", "error", err)
		return
	}
	if f == nil {
		log.Debug("gateway server not served: no tcp route of a bound VirtualService applies")
		return
	}
	chain := &listenerv3.FilterChain{Filters: []*listenerv3.Filter{f}}
	if k == kindTCP {
		b.plain, b.plainKind = chain, kindTCP
		return
	}
	names := sniHosts(s)
	if !b.claim(names) {
		log.Warn("gateway server not served: its hosts are already matched on this port", "hosts", names)
		return
	}
	ts, err := downstreamTLS(s.spec, nil)
	if err != nil {
		log.Warn("gateway server not served", "error", err)
		return
	}
	chain.FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: names}
	chain.TransportSocket = ts
	b.chains = append(b.chains, chain)
}

// tcpRoute returns the tcp_proxy of the first tcp route, in the order of
// the VirtualServices bound to s (namespace, then name) and of their tcp
// sections, with no match or a match that applies (see tcpMatchApplies);
// nil when none does. A route that cannot be built is logged and skipped.
func (b *chainBuilder) tcpRoute(s server, push *model.PushContext, log *slog.Logger) (*listenerv3.Filter, error) {
	port := s.spec.GetPort().GetNumber()
	for _, bvs := range s.virtualServices(push) {
		for i, tr := range bvs.vs.GetTcp() {
			if !tcpRouteApplies(tr.GetMatch(), port, bvs.cfg.Namespace, s.gatewayKey(), b.labels) {
				continue
			}
			f, err := tcpProxy(tr.GetRoute(), bvs.cfg.Namespace, push)
			if err != nil {
				log.Warn("tcp route not served", "virtualservice", bvs.cfg.Namespace+"/"+bvs.cfg.Name,
					"field", fmt.Sprintf("tcp[%d]", i), "error", err)
				continue
			}
			return f, nil
		}
	}
	return nil, nil
}

// tcpRouteApplies reports whether a tcp route with matches applies to the
// gateway gwKey's server on port: no match, or one match whose port (if
// set) is the server's, whose gateways (if set) name the gateway, and whose
// sourceLabels (if set) are labels of the router itself. (Istio's gateways
// check port and gateways only; sourceLabels are checked here as for HTTP
// routes on gateways.)
func tcpRouteApplies(matches []*networking.L4MatchAttributes, port uint32, vsNamespace, gwKey string, labels map[string]string) bool {
	if len(matches) == 0 {
		return true
	}
	for _, m := range matches {
		if m.GetPort() != 0 && m.GetPort() != port {
			continue
		}
		if len(m.GetGateways()) > 0 && !boundTo(m.GetGateways(), vsNamespace, gwKey) {
			continue
		}
		if !labelsMatch(m.GetSourceLabels(), labels) {
			continue
		}
		return true
	}
	return false
}
