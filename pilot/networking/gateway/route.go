package gateway

import (
	"log/slog"
	"sort"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// BlackHoleVirtualHost answers 404 on a gateway route configuration that
// no VirtualService serves, as Istio's "blackhole:PORT".
const BlackHoleVirtualHost = "blackhole"

// BuildRouteConfiguration returns route configuration name of a router
// proxy: "http.PORT" (the plain HTTP servers on PORT of the Gateways that
// select proxy) or "https.PORT.NAME.GW.NS" (one TLS-terminating server).
// Each host of a VirtualService bound to such a server (more specific of
// the VirtualService's and the server's host) gets a virtual host "HOST:PORT"
// with domains HOST and HOST:* (HOST:PORT for wildcard hosts), routes translated as for sidecars; the first
// VirtualService (by namespace, then name) to claim a host wins. With no
// bound VirtualService the configuration answers 404. A server with
// tls.httpsRedirect answers its plain HTTP requests with a redirect.
func BuildRouteConfiguration(proxy *model.Proxy, push *model.PushContext, name string, log *slog.Logger) *routev3.RouteConfiguration {
	rc := &routev3.RouteConfiguration{Name: name, ValidateClusters: wrapperspb.Bool(false)}
	port, ok := routePort(name)
	if !ok {
		return rc
	}
	byPort, _ := servers(proxy, push)
	vhosts := map[string]*routev3.VirtualHost{}
	delegates := route.PushDelegates(push)
	for _, s := range byPort[port] {
		k := serverKind(s.spec)
		if (k != kindHTTP && k != kindHTTPS) || s.routeName() != name {
			continue
		}
		for _, bvs := range s.virtualServices(push) {
			vsName := bvs.cfg.Namespace + "/" + bvs.cfg.Name
			vs := forGateway(bvs.vs, bvs.cfg.Namespace, s.gatewayKey(), push)
			t, err := route.TranslateVirtualService(vs, bvs.cfg.Namespace, route.Options{
				Port: port, Domain: push.DomainSuffix, ProxyNamespace: proxy.ConfigNamespace(),
				Labels: proxy.Labels(), Delegates: delegates,
			})
			for _, w := range t.Warnings {
				log.Warn("virtual service field not applied", "virtualservice", vsName, "field", w)
			}
			if err != nil {
				log.Warn("virtual service not applied", "virtualservice", vsName, "gateway", s.gatewayKey(), "error", err)
				continue
			}
			if len(t.Routes) == 0 {
				continue
			}
			for _, h := range bvs.hosts {
				vhName := h + ":" + strconv.FormatUint(uint64(port), 10)
				if _, taken := vhosts[vhName]; taken {
					log.Debug("virtual host already served", "virtualservice", vsName, "host", h)
					continue
				}
				vh := &routev3.VirtualHost{Name: vhName, Domains: domains(h, port), Routes: t.Routes}
				if k == kindHTTP && s.spec.GetTls().GetHttpsRedirect() {
					vh.RequireTls = routev3.VirtualHost_ALL
				}
				vhosts[vhName] = vh
			}
		}
	}
	names := make([]string, 0, len(vhosts))
	for n := range vhosts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		rc.VirtualHosts = append(rc.VirtualHosts, vhosts[n])
	}
	if len(rc.VirtualHosts) == 0 {
		rc.VirtualHosts = []*routev3.VirtualHost{{
			Name:    BlackHoleVirtualHost + ":" + strconv.FormatUint(uint64(port), 10),
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Name:   BlackHoleVirtualHost,
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 404}},
			}},
		}}
	}
	return rc
}

// routePort parses the port of "http.PORT" or "https.PORT.…".
func routePort(name string) (uint32, bool) {
	rest, ok := strings.CutPrefix(name, "http.")
	if !ok {
		if rest, ok = strings.CutPrefix(name, "https."); !ok {
			return 0, false
		}
		rest, _, _ = strings.Cut(rest, ".")
	}
	p, err := strconv.ParseUint(rest, 10, 32)
	if err != nil || p == 0 {
		return 0, false
	}
	return uint32(p), true
}

// domains are the Host header values of a gateway host: the host and
// HOST:* (any port, as behind a load balancer); "*" alone. Envoy allows one
// wildcard per domain, so a wildcard host keeps the server's port instead
// ("*.example.com:443"), as in Istio.
func domains(host string, port uint32) []string {
	switch {
	case host == "*":
		return []string{"*"}
	case strings.HasPrefix(host, "*"):
		return []string{host, host + ":" + strconv.FormatUint(uint64(port), 10)}
	}
	return []string{host, host + ":*"}
}
