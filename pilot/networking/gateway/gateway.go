// Package gateway builds the listeners (LDS) and route configurations (RDS)
// of router proxies — Istio's ingress and egress gateways — from the
// Gateways that select them and the VirtualServices bound to those.
package gateway

import (
	"sort"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// server is one server of a Gateway that selects the proxy.
type server struct {
	gw   *model.Config
	spec *networking.Server
}

// gatewayKey is "NS/NAME", the form VirtualServices bind to.
func (s server) gatewayKey() string { return s.gw.Namespace + "/" + s.gw.Name }

// kind says how a server's traffic is handled.
type kind int

const (
	kindUnsupported kind = iota
	// kindHTTP: plain HTTP (HTTP, HTTP2, GRPC, GRPC-WEB, HTTP_PROXY), routes "http.PORT".
	kindHTTP
	// kindHTTPS: TLS terminated, then HTTP routes "https.PORT.NAME.GW.NS".
	kindHTTPS
	// kindPassthrough: TLS forwarded by SNI to the VirtualServices' tls routes.
	kindPassthrough
	// kindTCP: opaque TCP (TCP, MONGO, REDIS, MYSQL without tls) to the
	// first applying tcp route of the bound VirtualServices.
	kindTCP
	// kindTLSTCP: TLS terminated (protocol TLS, or a TCP protocol with tls
	// settings), then the bytes go to a tcp route as for kindTCP.
	kindTLSTCP
	// kindAutoPassthrough: istiod's east-west (SNI-DNAT) server: mTLS
	// forwarded by its SNI, the name of the destination's SNI-DNAT cluster.
	kindAutoPassthrough
)

// tcpProtocols are the opaque protocols Istio forwards with tcp routes.
var tcpProtocols = map[string]bool{"TCP": true, "MONGO": true, "REDIS": true, "MYSQL": true}

// serverKind classifies a server as Istio does: HTTP protocols route HTTP;
// HTTPS terminates TLS then routes HTTP; PASSTHROUGH forwards TLS by SNI;
// TLS and TCP protocols otherwise go to tcp routes, TLS being terminated
// when the server has tls settings; AUTO_PASSTHROUGH TLS and HTTPS
// servers forward by SNI to the SNI-DNAT clusters (see autoPassthrough).
// Unknown protocols, and AUTO_PASSTHROUGH on a TCP protocol, are not supported.
func serverKind(s *networking.Server) kind {
	proto := strings.ToUpper(s.GetPort().GetProtocol())
	mode := s.GetTls().GetMode()
	switch {
	case proto == "HTTP" || proto == "HTTP2" || proto == "GRPC" || proto == "GRPC-WEB" || proto == "HTTP_PROXY":
		return kindHTTP
	case proto != "HTTPS" && proto != "TLS" && !tcpProtocols[proto]:
		return kindUnsupported
	case model.IsAutoPassthrough(s):
		return kindAutoPassthrough
	case mode == networking.ServerTLSSettings_AUTO_PASSTHROUGH:
		return kindUnsupported
	case tcpProtocols[proto] && s.GetTls() == nil:
		return kindTCP
	case mode == networking.ServerTLSSettings_PASSTHROUGH:
		return kindPassthrough
	case proto == "HTTPS":
		return kindHTTPS
	}
	return kindTLSTCP
}

// Selected returns the Gateways that configure proxy, a router (nil for
// a sidecar), as the gateway generators pick them.
func Selected(proxy *model.Proxy, push *model.PushContext) []*model.Config {
	return selected(proxy, push)
}

// selected returns the Gateways (of any namespace) whose selector matches
// the labels of proxy, a router; an empty selector matches every router,
// as in Istio.
func selected(proxy *model.Proxy, push *model.PushContext) []*model.Config {
	return push.GatewaysFor(proxy)
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// servers returns the servers of the selected Gateways, by port number,
// each port's servers in Gateway order.
func servers(proxy *model.Proxy, push *model.PushContext) (map[uint32][]server, []uint32) {
	byPort := map[uint32][]server{}
	for _, gw := range selected(proxy, push) {
		for _, s := range gw.Spec.(*networking.Gateway).GetServers() {
			p := s.GetPort().GetNumber()
			if p == 0 {
				continue
			}
			byPort[p] = append(byPort[p], server{gw: gw, spec: s})
		}
	}
	ports := make([]uint32, 0, len(byPort))
	for p := range byPort {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	return byPort, ports
}

// HTTPRouteName is the route configuration of a port's plain HTTP servers,
// as Istio names it: "http.8080".
func HTTPRouteName(port uint32) string {
	return "http." + strconv.FormatUint(uint64(port), 10)
}

// HTTPSRouteName is the route configuration of one TLS-terminating server,
// as Istio names it: "https.443.PORTNAME.GATEWAY.NAMESPACE".
func HTTPSRouteName(port uint32, portName, gateway, namespace string) string {
	return "https." + strconv.FormatUint(uint64(port), 10) + "." + portName + "." + gateway + "." + namespace
}

// routeName returns the route configuration name of an HTTP or HTTPS server.
func (s server) routeName() string {
	if serverKind(s.spec) == kindHTTPS {
		return HTTPSRouteName(s.spec.GetPort().GetNumber(), s.spec.GetPort().GetName(), s.gw.Name, s.gw.Namespace)
	}
	return HTTPRouteName(s.spec.GetPort().GetNumber())
}

// serverHost is one entry of Server.hosts: "NS/HOST", "*/HOST", "./HOST"
// or "HOST" (any namespace).
type serverHost struct {
	namespace string // "*" for any
	host      string
}

func (s server) hosts() []serverHost {
	var out []serverHost
	for _, h := range s.spec.GetHosts() {
		ns, host, ok := strings.Cut(h, "/")
		if !ok {
			ns, host = "*", h
		}
		if ns == "." {
			ns = s.gw.Namespace
		}
		out = append(out, serverHost{namespace: ns, host: host})
	}
	return out
}

// intersect returns the more specific of two hosts when one covers the
// other ("*" and "*.example.com" cover "a.example.com").
func intersect(a, b string) (string, bool) {
	switch {
	case a == b:
		return a, true
	case covers(a, b):
		return b, true
	case covers(b, a):
		return a, true
	}
	return "", false
}

func covers(pattern, host string) bool {
	if pattern == "*" {
		return true
	}
	return strings.HasPrefix(pattern, "*") && len(host) > len(pattern)-1 && strings.HasSuffix(host, pattern[1:])
}

// resolveGateway turns a VirtualService's gateway reference into "NS/NAME".
func resolveGateway(ref, vsNamespace string) string {
	if ref == "mesh" || strings.Contains(ref, "/") {
		return ref
	}
	return vsNamespace + "/" + ref
}

// boundTo reports whether a VirtualService of namespace ns names gateway
// key ("NS/NAME") among refs.
func boundTo(refs []string, ns, key string) bool {
	for _, g := range refs {
		if resolveGateway(g, ns) == key {
			return true
		}
	}
	return false
}

// boundVirtualService is a VirtualService bound to a server, with the hosts
// it serves there (each the more specific of the VirtualService's and the
// server's).
type boundVirtualService struct {
	cfg   *model.Config
	vs    *networking.VirtualService
	hosts []string
}

// virtualServices returns the VirtualServices bound to s whose hosts
// intersect its hosts, in the push's order (namespace, then name).
func (s server) virtualServices(push *model.PushContext) []boundVirtualService {
	var out []boundVirtualService
	all := push.VirtualServices()
	key := s.gatewayKey()
	shs := s.hosts()
	for i := range all {
		c := &all[i]
		vs, ok := c.Spec.(*networking.VirtualService)
		if !ok || !boundTo(vs.GetGateways(), c.Namespace, key) {
			continue
		}
		var hosts []string
		seen := map[string]bool{}
		for _, h := range vs.GetHosts() {
			h = model.ResolveShortname(h, c.Namespace, push.DomainSuffix)
			for _, sh := range shs {
				if sh.namespace != "*" && sh.namespace != c.Namespace {
					continue
				}
				if got, ok := intersect(h, sh.host); ok && !seen[got] {
					seen[got] = true
					hosts = append(hosts, got)
				}
			}
		}
		if len(hosts) > 0 {
			out = append(out, boundVirtualService{cfg: c, vs: vs, hosts: hosts})
		}
	}
	return out
}
