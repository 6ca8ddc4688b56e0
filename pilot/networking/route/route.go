// Package route builds the HTTP route configurations (RDS) of a sidecar.
package route

import (
	"log/slog"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
)

// Names of the catch-all virtual hosts and of the default route, as in Istio.
const (
	AllowAnyVirtualHost = "allow_any"
	BlockAllVirtualHost = "block_all"
	DefaultRouteName    = "default"
)

// BuildRouteConfiguration returns the route configuration name (a port
// number, "9080") for proxy: one virtual host per visible HTTP service with
// that port (under a Sidecar, those its egress listener for the port
// selects; see model.PushContext.ServicesOnPort), then the catch-all
// host. A name that is not a port with HTTP services gives an empty
// configuration of that name. A VirtualService that cannot be translated
// is logged and its host gets the default route.
func BuildRouteConfiguration(proxy *model.Proxy, push *model.PushContext, name string, log *slog.Logger) *routev3.RouteConfiguration {
	rc := &routev3.RouteConfiguration{Name: name, ValidateClusters: wrapperspb.Bool(false), IgnorePortInHostMatching: true}
	p, err := strconv.ParseUint(name, 10, 32)
	if err != nil || p == 0 {
		return rc
	}
	port := uint32(p)
	used := map[string]bool{}
	scope := push.SidecarScope(proxy)
	// Under a Sidecar egress listener with this port, its hosts (and its
	// protocol) decide.
	for _, svc := range push.ServicesOnPort(proxy, port) {
		sp, ok := svc.PortByNumber(port)
		if !ok || !scope.OutboundProtocol(sp).IsHTTP() {
			continue
		}
		var domains []string
		for _, d := range Domains(svc, proxy.ConfigNamespace(), push.DomainSuffix, proxy.Metadata.ClusterID) {
			if !used[d] {
				used[d] = true
				domains = append(domains, d)
			}
		}
		if len(domains) == 0 {
			log.Debug("virtual host shadowed: every domain is taken", "route", name, "host", svc.Hostname)
			continue
		}
		rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
			Name:    svc.Hostname + ":" + strconv.FormatUint(p, 10),
			Domains: domains,
			Routes:  serviceRoutes(proxy, push, svc, port, log),
		})
	}
	if len(rc.VirtualHosts) == 0 || used["*"] {
		return rc
	}
	rc.VirtualHosts = append(rc.VirtualHosts, catchAll(push.SidecarScope(proxy).AllowAny()))
	return rc
}

func serviceRoutes(proxy *model.Proxy, push *model.PushContext, svc *model.Service, port uint32, log *slog.Logger) []*routev3.Route {
	sr := ServiceRoutesFor(proxy, push, svc, port)
	if sr.VirtualService != nil {
		c := sr.VirtualService
		for _, w := range sr.Warnings {
			log.Warn("virtual service field not applied", "virtualservice", c.Namespace+"/"+c.Name, "field", w)
		}
		if sr.Err != nil {
			log.Warn("virtual service not applied", "virtualservice", c.Namespace+"/"+c.Name, "host", svc.Hostname, "error", sr.Err)
		}
	}
	return sr.Routes
}

// ServiceRoutes are the routes of one service's virtual host and what
// decided them.
type ServiceRoutes struct {
	// VirtualService is the one that applies (nil: none does, or only one
	// with tcp routes); the routes are its translation unless Err is set.
	VirtualService *model.Config
	Translation
	// Err is why VirtualService could not be translated: then Routes is
	// the default route, as when none applies.
	Err error
}

// ServiceRoutesFor decides the routes of svc's virtual host on port for
// proxy: the first VirtualService of PushContext.VirtualServicesFor with
// http routes, translated, else the default route to the service's
// cluster. The RDS generator and explain both use it.
func ServiceRoutesFor(proxy *model.Proxy, push *model.PushContext, svc *model.Service, port uint32) ServiceRoutes {
	var sr ServiceRoutes
	// A VirtualService with tcp routes only does not route HTTP.
	if vss := push.VirtualServicesFor(proxy, svc.Hostname); len(vss) > 0 && len(vss[0].Spec.(*networking.VirtualService).GetHttp()) > 0 {
		c := vss[0]
		t, err := TranslateVirtualService(c.Spec.(*networking.VirtualService), c.Namespace, Options{
			Port: port, Domain: push.DomainSuffix, ProxyNamespace: proxy.ConfigNamespace(),
			Labels: proxy.Labels(), Delegates: PushDelegates(push),
			HashPolicy: PushHashPolicies(push, proxy),
		})
		sr.VirtualService, sr.Warnings, sr.Err = c, t.Warnings, err
		if err == nil {
			sr.Translation = t
			return sr
		}
	}
	r := DefaultRoute(clustername.Build(clustername.Outbound, "", svc.Hostname, port))
	r.GetRoute().RetryPolicy = DefaultRetryPolicy()
	r.GetRoute().HashPolicy = PushHashPolicies(push, proxy)(svc.Hostname, "", port)
	sr.Routes = []*routev3.Route{r}
	return sr
}

// DestinationCluster returns the cluster a destination of a route of a
// VirtualService in namespace ns sends to, on a route configuration of port.
func DestinationCluster(d *networking.Destination, ns string, port uint32, domain string) string {
	host, subset, p := destinationParts(d, ns, port, domain)
	return clustername.Build(clustername.Outbound, subset, host, p)
}

// DefaultRoute sends every path to clusterName with no timeout: the route
// of a service no VirtualService covers.
func DefaultRoute(clusterName string) *routev3.Route {
	return &routev3.Route{
		Name:  DefaultRouteName,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: clusterName},
			Timeout:          durationpb.New(0),
		}},
	}
}

// catchAll is the "*" host: pass through to the original destination
// (ALLOW_ANY) or answer 502 (REGISTRY_ONLY), as Istio does.
func catchAll(allowAny bool) *routev3.VirtualHost {
	match := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if !allowAny {
		return &routev3.VirtualHost{Name: BlockAllVirtualHost, Domains: []string{"*"}, Routes: []*routev3.Route{{
			Name: BlockAllVirtualHost, Match: match,
			Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 502}},
		}}}
	}
	return &routev3.VirtualHost{Name: AllowAnyVirtualHost, Domains: []string{"*"}, Routes: []*routev3.Route{{
		Name: AllowAnyVirtualHost, Match: match,
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: clustername.Passthrough},
			Timeout:          durationpb.New(0),
		}},
	}}}
}

// Domains returns the Host header values a sidecar in proxyNS routes to svc,
// as Istio generates them: FQDN and the absolute FQDN. (trailing dot); for
// Kubernetes-style hosts NAME.NS.svc.DOMAIN also, from the service's own
// namespace, NAME, then NAME.NS.svc and NAME.NS; the VIP. None carries a
// port: the route configuration ignores the Host header's port
// (ignore_port_in_host_matching), as Istio's does.
func Domains(svc *model.Service, proxyNS, domainSuffix, clusterID string) []string {
	out := []string{svc.Hostname}
	if !strings.HasPrefix(svc.Hostname, "*") {
		out = append(out, svc.Hostname+".")
	}
	if nameNS, ok := strings.CutSuffix(svc.Hostname, ".svc."+domainSuffix); ok && domainSuffix != "" {
		if name, ns, ok := strings.Cut(nameNS, "."); ok && !strings.Contains(ns, ".") {
			if ns == proxyNS {
				out = append(out, name)
			}
			out = append(out, nameNS+".svc", nameNS)
		}
	}
	if svc.HasAddressFor(clusterID) {
		vip := svc.AddressFor(clusterID)
		if strings.Contains(vip, ":") {
			out = append(out, "["+vip+"]")
		} else {
			out = append(out, vip)
		}
	}
	return out
}
