package grpcgen

import (
	"fmt"
	"log/slog"

	"google.golang.org/protobuf/proto"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// RouteGenerator builds the route configuration an API listener names: one
// virtual host for the dialled target with the routes of the service's
// VirtualService, or a default route to the service's cluster.
//
// Logger may be nil (no logs); it receives a warning per VirtualService
// field the routes do not carry (UnsupportedFields, missing delegates).
type RouteGenerator struct {
	Logger *slog.Logger
}

// Generate returns a route configuration per requested name that resolves to
// a visible service port, or per HTTP or gRPC port for a wildcard watch.
func (g RouteGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	out := map[string]proto.Message{}
	names, wildcard := requested(w)
	for _, t := range targets(proxy, push, names, wildcard) {
		rc, err := buildRouteConfig(proxy, push, t, g.Logger)
		if err != nil {
			return nil, err
		}
		out[t.name] = rc
	}
	return marshalAll(model.RouteType, out)
}

func buildRouteConfig(proxy *model.Proxy, push *model.PushContext, t target, log *slog.Logger) (*routev3.RouteConfiguration, error) {
	host := t.service.Hostname
	canonical := hostPort(host, t.port.Port)
	routes, err := routesFor(proxy, push, t, log)
	if err != nil {
		return nil, err
	}
	return &routev3.RouteConfiguration{
		Name: t.name,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    canonical,
			Domains: dedupe(t.name, canonical, host),
			Routes:  routes,
		}},
	}, nil
}

// routesFor translates the first (oldest) VirtualService bound to the
// service, as Istio does for conflicting VirtualServices, falling back to
// the default route when there is none.
func routesFor(proxy *model.Proxy, push *model.PushContext, t target, log *slog.Logger) ([]*routev3.Route, error) {
	for _, c := range push.VirtualServicesFor(proxy, t.service.Hostname) {
		vs, ok := c.Spec.(*networking.VirtualService)
		if !ok || len(vs.GetHttp()) == 0 {
			// tcp or tls routes only: nothing for HTTP.
			continue
		}
		rc := routeContext{proxy: proxy, push: push, vsNamespace: c.Namespace, target: t}
		routes, warns, err := buildVSRoutes(rc, vs)
		if err != nil {
			return nil, fmt.Errorf("route %q: VirtualService %s/%s: %w", t.name, c.Namespace, c.Name, err)
		}
		if log != nil {
			for _, w := range append(UnsupportedFields(vs), warns...) {
				log.Warn("virtual service field not applied", "virtualservice", c.Namespace+"/"+c.Name, "route", t.name, "field", w)
			}
		}
		return routes, nil
	}
	r := defaultRoute(t)
	r.GetRoute().HashPolicy = headerHashPolicy(push, proxy, t.service.Hostname, "", t.port.Port)
	return []*routev3.Route{r}, nil
}

// defaultRoute sends every request to the service's subset-less cluster.
func defaultRoute(t target) *routev3.Route {
	return &routev3.Route{
		Name:  "default",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: clusterName(t.port.Port, "", t.service.Hostname)},
		}},
	}
}

func dedupe(in ...string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if !containsString(out, s) {
			out = append(out, s)
		}
	}
	return out
}
