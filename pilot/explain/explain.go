// Package explain answers "why does this proxy have this config?": for one
// resource a proxy is served (a route configuration, cluster, endpoint
// assignment or listener) it names the configuration objects that shaped
// it and the decisions they took part in. It re-derives those decisions
// with the functions the generators use, from the same PushContext, so an
// explanation cannot disagree with what the proxy was sent.
package explain

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshpilot/meshpilot/model"
)

// Explanation is the answer for one resource of one proxy.
type Explanation struct {
	Proxy string `json:"proxy"`
	// Type is the short type name (cds, eds, lds, rds); TypeURL the full one.
	Type    string `json:"type"`
	TypeURL string `json:"typeUrl"`
	Name    string `json:"name"`
	// PushVersion identifies the snapshot the answer was derived from.
	PushVersion string `json:"pushVersion,omitempty"`
	// Scope is the proxy's Sidecar scope.
	Scope Scope `json:"scope"`
	// Configs lists every configuration object that shaped the resource,
	// sorted by kind, namespace and name.
	Configs []Object `json:"configs"`

	Routes    *Routes    `json:"routes,omitempty"`
	Cluster   *Cluster   `json:"cluster,omitempty"`
	Endpoints *Endpoints `json:"endpoints,omitempty"`
	Listener  *Listener  `json:"listener,omitempty"`
}

// Object identifies one configuration object and where it came from.
type Object struct {
	Kind            string `json:"kind"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	Generation      int64  `json:"generation,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Source is where the object was read ("bookinfo.yaml#2": file and
	// document index in file mode), when known.
	Source string `json:"source,omitempty"`
}

// String is "Kind namespace/name".
func (o Object) String() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// Scope is the Sidecar scope of a proxy.
type Scope struct {
	Namespace string `json:"namespace"`
	// Sidecar is the Sidecar in force; nil: the default scope (every
	// service exported to the namespace).
	Sidecar *Object `json:"sidecar,omitempty"`
}

// ServiceRef names the Service (or ServiceEntry) behind a resource.
type ServiceRef struct {
	Hostname string `json:"hostname"`
	// Kind is Service (Kubernetes) or ServiceEntry.
	Kind            string   `json:"kind"`
	Namespace       string   `json:"namespace"`
	Name            string   `json:"name"`
	ResourceVersion string   `json:"resourceVersion,omitempty"`
	ExportTo        []string `json:"exportTo,omitempty"`
	// VisibleBy says why the proxy sees the service: "default scope" or
	// the Sidecar and its egress host that selects it.
	VisibleBy string `json:"visibleBy,omitempty"`
}

// Short type names and the type URLs they stand for.
var shortTypes = map[string]string{
	"cds": model.ClusterType, "eds": model.EndpointType,
	"lds": model.ListenerType, "rds": model.RouteType,
}

// TypeURL resolves a short type name (cds, eds, lds, rds; any case) or a
// type URL of those four; false for anything else.
func TypeURL(t string) (string, bool) {
	if u, ok := shortTypes[strings.ToLower(t)]; ok {
		return u, true
	}
	for _, u := range shortTypes {
		if u == t {
			return u, true
		}
	}
	return "", false
}

func shortType(typeURL string) string {
	for s, u := range shortTypes {
		if u == typeURL {
			return s
		}
	}
	return typeURL
}

// Explain explains the resource name of typeURL (see TypeURL) that proxy
// is served from push. An error means the type is not explained or the
// name is not one the proxy could be served; it names both.
func Explain(proxy *model.Proxy, push *model.PushContext, typeURL, name string) (Explanation, error) {
	u, ok := TypeURL(typeURL)
	if !ok {
		return Explanation{}, fmt.Errorf("explain: type %q: want cds, eds, lds, rds or their type URLs", typeURL)
	}
	scope := push.SidecarScope(proxy)
	c := &collector{push: push, scope: scope, seen: map[model.ConfigKey]Object{}}
	e := Explanation{Proxy: proxy.ID, Type: shortType(u), TypeURL: u, Name: name, PushVersion: push.Version,
		Scope: Scope{Namespace: proxy.ConfigNamespace()}}
	if scope.Sidecar != nil {
		o := c.add(scope.Sidecar)
		e.Scope.Sidecar = &o
	}
	var err error
	switch u {
	case model.RouteType:
		e.Routes, err = c.routes(proxy, name)
	case model.ClusterType:
		e.Cluster, err = c.cluster(proxy, name)
	case model.EndpointType:
		e.Endpoints, err = c.endpoints(proxy, name)
	case model.ListenerType:
		e.Listener, err = c.listener(proxy, name)
	}
	if err != nil {
		return Explanation{}, fmt.Errorf("explain %s %q for %s: %w", e.Type, name, proxy.ID, err)
	}
	e.Configs = c.objects()
	return e, nil
}

// collector gathers the objects an explanation names.
type collector struct {
	push  *model.PushContext
	scope *model.SidecarScope
	seen  map[model.ConfigKey]Object
}

// add records c and returns its Object.
func (c *collector) add(cfg *model.Config) Object {
	o := objectOf(cfg)
	c.seen[cfg.Key()] = o
	return o
}

// addService records the object defining svc and returns its reference.
func (c *collector) addService(svc *model.Service) ServiceRef {
	kind := "Service"
	if svc.Registry == model.RegistryServiceEntry {
		kind = string(model.KindServiceEntry)
	}
	ref := ServiceRef{Hostname: svc.Hostname, Kind: kind, Namespace: svc.Namespace, Name: svc.Name,
		ResourceVersion: svc.ResourceVersion, ExportTo: svc.ExportTo, VisibleBy: c.visibleBy(svc)}
	c.seen[model.ConfigKey{Kind: model.Kind(kind), Namespace: svc.Namespace, Name: svc.Name}] = Object{
		Kind: kind, Namespace: svc.Namespace, Name: svc.Name, ResourceVersion: svc.ResourceVersion}
	return ref
}

// visibleBy says why the scope sees svc (or that it does not).
func (c *collector) visibleBy(svc *model.Service) string {
	if c.scope.Service(svc.Hostname) == nil {
		return "not visible"
	}
	if c.scope.Sidecar == nil {
		return "default scope"
	}
	return fmt.Sprintf("Sidecar %s/%s egress host %s", c.scope.Sidecar.Namespace, c.scope.Sidecar.Name,
		c.scope.EgressHostFor(svc.Namespace, svc.Hostname))
}

func (c *collector) objects() []Object {
	out := make([]Object, 0, len(c.seen))
	for _, o := range c.seen {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Object) int {
		return model.ConfigKey{Kind: model.Kind(a.Kind), Namespace: a.Namespace, Name: a.Name}.Compare(
			model.ConfigKey{Kind: model.Kind(b.Kind), Namespace: b.Namespace, Name: b.Name})
	})
	return out
}

func objectOf(c *model.Config) Object {
	return Object{Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name, Generation: c.Generation,
		ResourceVersion: c.ResourceVersion, Source: c.Source}
}

// findConfig returns the object namespace/name of list, or nil.
func findConfig(list []model.Config, namespace, name string) *model.Config {
	for i := range list {
		if list[i].Namespace == namespace && list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}
