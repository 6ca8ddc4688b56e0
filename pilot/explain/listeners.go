package explain

import (
	"fmt"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
)

// Listener explains a listener coarsely: the objects that configure the
// proxy's listeners, as the listener generators select them.
type Listener struct {
	// Direction is inbound (virtualInbound, the proxy's own ports),
	// outbound, or gateway.
	Direction string `json:"direction"`
	// Gateways select the proxy (routers only).
	Gateways []Object `json:"gateways,omitempty"`
	// PeerAuthentications decide the inbound mTLS mode, widest first;
	// AuthorizationPolicies, RequestAuthentications, Telemetries (widest
	// first), WasmPlugins and EnvoyFilters are those that apply to the
	// proxy's workload.
	PeerAuthentications    []Object `json:"peerAuthentications,omitempty"`
	AuthorizationPolicies  []Object `json:"authorizationPolicies,omitempty"`
	RequestAuthentications []Object `json:"requestAuthentications,omitempty"`
	Telemetries            []Object `json:"telemetries,omitempty"`
	WasmPlugins            []Object `json:"wasmPlugins,omitempty"`
	EnvoyFilters           []string `json:"envoyFilters,omitempty"`
	Note                   string   `json:"note,omitempty"`
}

// Names of the sidecar's two virtual listeners.
const (
	virtualInbound  = "virtualInbound"
	virtualOutbound = "virtualOutbound"
)

func (c *collector) listener(proxy *model.Proxy, name string) (*Listener, error) {
	out := &Listener{Direction: "outbound"}
	ns, labels := proxy.ConfigNamespace(), proxy.Labels()
	inbound := name == virtualInbound
	if proxy.Type == model.Router {
		out.Direction = "gateway"
		inbound = true // gateways enforce policies on what they receive
		for _, g := range gateway.Selected(proxy, c.push) {
			out.Gateways = append(out.Gateways, c.add(g))
		}
		if len(out.Gateways) == 0 {
			return nil, fmt.Errorf("no Gateway selects the proxy")
		}
	} else if inbound {
		out.Direction = "inbound"
	}
	if inbound {
		sec := c.push.SecurityPolicies()
		if proxy.Type != model.Router {
			for _, pa := range authn.WorkloadPolicy(sec, ns, labels).Sources {
				out.PeerAuthentications = append(out.PeerAuthentications, c.add(pa))
			}
		}
		for _, ap := range sec.AuthorizationPoliciesFor(ns, labels) {
			out.AuthorizationPolicies = append(out.AuthorizationPolicies, c.add(ap))
		}
		for _, ra := range sec.RequestAuthenticationsFor(ns, labels) {
			out.RequestAuthentications = append(out.RequestAuthentications, c.add(ra))
		}
		for _, w := range c.push.WasmPlugins().For(ns, labels) {
			o := Object{Kind: string(model.KindWasmPlugin), Namespace: w.Namespace, Name: w.Name, ResourceVersion: w.Version}
			c.seen[model.ConfigKey{Kind: model.KindWasmPlugin, Namespace: w.Namespace, Name: w.Name}] = o
			out.WasmPlugins = append(out.WasmPlugins, o)
		}
	} else if name != virtualOutbound {
		out.Note = "outbound listener: its routes and clusters are explained by rds and cds"
	}
	t := c.push.Telemetries().For(ns, labels)
	for _, cfg := range []*model.Config{t.Root, t.Namespace, t.Workload} {
		if cfg != nil {
			out.Telemetries = append(out.Telemetries, c.add(cfg))
		}
	}
	if ps := envoyfilter.For(proxy, c.push, envoyfilter.Reporter{}); ps != nil {
		ctx := envoyfilter.SidecarOutbound
		switch {
		case proxy.Type == model.Router:
			ctx = envoyfilter.Gateway
		case inbound:
			ctx = envoyfilter.SidecarInbound
		}
		out.EnvoyFilters = ps.Filters(ctx, envoyfilter.ListenerKinds()...)
		c.addEnvoyFilters(out.EnvoyFilters)
	}
	return out, nil
}
