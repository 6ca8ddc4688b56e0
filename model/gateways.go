package model

import (
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// GatewaysFor returns the Gateways (of any namespace) whose selector
// matches the labels of proxy, a router (none for a sidecar); an empty
// selector matches every router, as in Istio.
func (pc *PushContext) GatewaysFor(proxy *Proxy) []*Config {
	if proxy.Type != Router {
		return nil
	}
	var out []*Config
	labels := proxy.Labels()
	for i := range pc.gateways {
		gw, ok := pc.gateways[i].Spec.(*networking.Gateway)
		if ok && selectorMatches(gw.GetSelector(), labels) {
			out = append(out, &pc.gateways[i])
		}
	}
	return out
}

// AutoPassthroughServers returns the servers of proxy's Gateways (see
// GatewaysFor) of protocol TLS or HTTPS with tls mode AUTO_PASSTHROUGH: istiod's east-west
// gateways, which forward mTLS by SNI to the SNI-DNAT clusters
// ("outbound_.PORT_.SUBSET_.HOST").
func (pc *PushContext) AutoPassthroughServers(proxy *Proxy) []*networking.Server {
	var out []*networking.Server
	for _, gw := range pc.GatewaysFor(proxy) {
		for _, s := range gw.Spec.(*networking.Gateway).GetServers() {
			if IsAutoPassthrough(s) {
				out = append(out, s)
			}
		}
	}
	return out
}

func selectorMatches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// IsAutoPassthrough reports whether s is an AUTO_PASSTHROUGH server of
// protocol TLS or HTTPS (the TLS protocols istiod passes through).
func IsAutoPassthrough(s *networking.Server) bool {
	proto := strings.ToUpper(s.GetPort().GetProtocol())
	return s.GetTls().GetMode() == networking.ServerTLSSettings_AUTO_PASSTHROUGH && (proto == "TLS" || proto == "HTTPS")
}
