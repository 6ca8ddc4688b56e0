package explain

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// Routes explains a route configuration.
type Routes struct {
	VirtualHosts []VirtualHost `json:"virtualHosts"`
	// Hidden are the HTTP services on the port that the proxy does not
	// get, and why.
	Hidden []HiddenHost `json:"hidden,omitempty"`
}

// VirtualHost explains one virtual host.
type VirtualHost struct {
	Name string `json:"name"`
	// Service is the service the host routes for; nil for the catch-all.
	Service *ServiceRef `json:"service,omitempty"`
	// VirtualService is the one that produced the routes; nil: the
	// default route, no VirtualService (see Note).
	VirtualService *Object   `json:"virtualService,omitempty"`
	ExportTo       []string  `json:"virtualServiceExportTo,omitempty"`
	Note           string    `json:"note,omitempty"`
	Routes         []RouteOf `json:"routes"`
}

// RouteOf explains one route of a virtual host.
type RouteOf struct {
	Name string `json:"name,omitempty"`
	// VirtualService ("namespace/name") and the index and name of its http
	// rule the route was made from; empty for a default route.
	VirtualService string `json:"virtualService,omitempty"`
	Rule           *int   `json:"rule,omitempty"`
	RuleName       string `json:"ruleName,omitempty"`
	// Delegate, for a route of a delegate VirtualService, names it and
	// the index and name of its http rule; VirtualService is then the root.
	Delegate         string `json:"delegate,omitempty"`
	DelegateRule     *int   `json:"delegateRule,omitempty"`
	DelegateRuleName string `json:"delegateRuleName,omitempty"`
	// Action is "route", "redirect" or "directResponse".
	Action       string        `json:"action"`
	Destinations []Destination `json:"destinations,omitempty"`
}

// Destination is one destination of a route, with its weight and the
// cluster it sends to.
type Destination struct {
	Host    string `json:"host"`
	Subset  string `json:"subset,omitempty"`
	Port    uint32 `json:"port,omitempty"`
	Weight  int32  `json:"weight"`
	Cluster string `json:"cluster"`
	// Dropped says why the destination gets no traffic ("weight 0").
	Dropped string `json:"dropped,omitempty"`
}

// HiddenHost is a service on the port the proxy does not see.
type HiddenHost struct {
	Hostname string `json:"hostname"`
	Reason   string `json:"reason"`
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func (c *collector) routes(proxy *model.Proxy, name string) (*Routes, error) {
	p, err := strconv.ParseUint(name, 10, 32)
	if err != nil || p == 0 {
		return nil, fmt.Errorf("not a sidecar route configuration (want a port number such as 9080)")
	}
	port := uint32(p)
	// The generator's own answer: the hosts in it, in its order.
	rc := route.BuildRouteConfiguration(proxy, c.push, name, discard)
	if len(rc.GetVirtualHosts()) == 0 {
		return nil, fmt.Errorf("no HTTP service on port %d is visible", port)
	}
	out := &Routes{}
	shown := map[string]bool{}
	for _, vh := range rc.GetVirtualHosts() {
		host, _, _ := strings.Cut(vh.GetName(), ":")
		shown[host] = true
		svc := c.scope.Service(host)
		if svc == nil {
			out.VirtualHosts = append(out.VirtualHosts, c.catchAll(vh))
			continue
		}
		out.VirtualHosts = append(out.VirtualHosts, c.virtualHost(proxy, vh.GetName(), svc, port))
	}
	out.Hidden = c.hidden(proxy, port, shown)
	return out, nil
}

func (c *collector) virtualHost(proxy *model.Proxy, name string, svc *model.Service, port uint32) VirtualHost {
	ref := c.addService(svc)
	vh := VirtualHost{Name: name, Service: &ref}
	sr := route.ServiceRoutesFor(proxy, c.push, svc, port)
	if sr.VirtualService == nil {
		vh.Note = "default route, no VirtualService"
		vh.Routes = append(vh.Routes, defaultRoute(sr.Routes))
		return vh
	}
	o := c.add(sr.VirtualService)
	vh.VirtualService = &o
	vh.ExportTo = sr.VirtualService.Spec.(*networking.VirtualService).GetExportTo()
	if sr.Err != nil {
		vh.Note = "default route: the VirtualService could not be applied: " + sr.Err.Error()
		vh.Routes = append(vh.Routes, defaultRoute(sr.Routes))
		return vh
	}
	root := sr.VirtualService.Namespace + "/" + sr.VirtualService.Name
	rootHTTP := sr.VirtualService.Spec.(*networking.VirtualService).GetHttp()
	for i, r := range sr.Routes {
		s := sr.Origins[i]
		ro := RouteOf{Name: r.GetName(), VirtualService: root, Rule: ptr(s.Index), Action: action(r)}
		if s.Index < len(rootHTTP) {
			ro.RuleName = rootHTTP[s.Index].GetName()
		}
		if s.Delegate != "" {
			ro.Delegate, ro.DelegateRule = s.Delegate, ptr(s.DelegateIndex)
			ns, n, _ := strings.Cut(s.Delegate, "/")
			if d := findConfig(c.push.VirtualServices(), ns, n); d != nil {
				c.add(d)
				if dh := d.Spec.(*networking.VirtualService).GetHttp(); s.DelegateIndex < len(dh) {
					ro.DelegateRuleName = dh[s.DelegateIndex].GetName()
				}
			}
		}
		for _, d := range s.Route.GetRoute() {
			dst := Destination{Host: d.GetDestination().GetHost(), Subset: d.GetDestination().GetSubset(),
				Port: d.GetDestination().GetPort().GetNumber(), Weight: d.GetWeight(),
				Cluster: route.DestinationCluster(d.GetDestination(), s.Namespace, port, c.push.DomainSuffix)}
			switch {
			case d.GetWeight() == 0 && len(s.Route.GetRoute()) > 1:
				dst.Dropped = "weight 0"
			case d.GetWeight() == 0:
				dst.Weight = 100 // a lone destination takes all traffic
			}
			ro.Destinations = append(ro.Destinations, dst)
		}
		vh.Routes = append(vh.Routes, ro)
	}
	return vh
}

func defaultRoute(rs []*routev3.Route) RouteOf {
	ro := RouteOf{Action: "route"}
	if len(rs) > 0 {
		ro.Name = rs[0].GetName()
		if cl := rs[0].GetRoute().GetCluster(); cl != "" {
			ro.Destinations = []Destination{{Cluster: cl, Weight: 100, Host: clusterHost(cl)}}
		}
	}
	return ro
}

func clusterHost(name string) string {
	parts := strings.SplitN(name, "|", 4)
	if len(parts) == 4 {
		return parts[3]
	}
	return ""
}

func (c *collector) catchAll(vh *routev3.VirtualHost) VirtualHost {
	out := VirtualHost{Name: vh.GetName()}
	policy := "mesh outboundTrafficPolicy"
	if c.scope.Sidecar != nil && c.scope.Sidecar.Spec.(*networking.Sidecar).GetOutboundTrafficPolicy() != nil {
		policy = fmt.Sprintf("Sidecar %s/%s outboundTrafficPolicy", c.scope.Sidecar.Namespace, c.scope.Sidecar.Name)
	}
	if c.scope.AllowAny() {
		out.Note = "catch-all: ALLOW_ANY (" + policy + "), passthrough to the original destination"
	} else {
		out.Note = "catch-all: REGISTRY_ONLY (" + policy + "), 502 for unknown hosts"
	}
	for _, r := range vh.GetRoutes() {
		ro := RouteOf{Name: r.GetName(), Action: action(r)}
		if cl := r.GetRoute().GetCluster(); cl != "" {
			ro.Destinations = []Destination{{Cluster: cl, Weight: 100}}
		}
		out.Routes = append(out.Routes, ro)
	}
	return out
}

// hidden lists the HTTP services with port that the route configuration
// leaves out for proxy, and why.
func (c *collector) hidden(proxy *model.Proxy, port uint32, shown map[string]bool) []HiddenHost {
	onPort := map[string]bool{}
	for _, svc := range c.push.ServicesOnPort(proxy, port) {
		onPort[svc.Hostname] = true
	}
	var out []HiddenHost
	for _, svc := range c.push.Services() {
		sp, ok := svc.PortByNumber(port)
		if !ok || !c.scope.OutboundProtocol(sp).IsHTTP() || shown[svc.Hostname] {
			continue
		}
		var why string
		switch {
		case onPort[svc.Hostname]:
			why = "every domain of it is taken by an earlier virtual host"
		case !svc.VisibleTo(proxy.ConfigNamespace()):
			why = fmt.Sprintf("exportTo %v does not include namespace %s", svc.ExportTo, proxy.ConfigNamespace())
		case c.scope.Service(svc.Hostname) == nil:
			why = fmt.Sprintf("no egress host of Sidecar %s/%s selects it", c.scope.Sidecar.Namespace, c.scope.Sidecar.Name)
		default:
			why = fmt.Sprintf("the egress listeners of Sidecar %s/%s do not select it on port %d", c.scope.Sidecar.Namespace, c.scope.Sidecar.Name, port)
		}
		out = append(out, HiddenHost{Hostname: svc.Hostname, Reason: why})
	}
	return out
}

func action(r *routev3.Route) string {
	switch r.GetAction().(type) {
	case *routev3.Route_Redirect:
		return "redirect"
	case *routev3.Route_DirectResponse:
		return "directResponse"
	}
	return "route"
}

func ptr[T any](v T) *T { return &v }
