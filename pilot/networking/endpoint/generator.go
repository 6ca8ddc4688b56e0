package endpoint

import (
	"fmt"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	"github.com/meshpilot/meshpilot/pilot/networking/resource"
)

// Generator serves EDS. It is stateless; the zero value is ready to use.
//
// Generate always returns the assignment of every subscribed cluster
// (unordered: sorting thousands of names per proxy per push costs more than
// building them from the cache), whatever the request: that is a complete
// State-of-the-World answer. For an endpoint-only push a transport that sends incremental
// (Delta) updates may send only the clusters AffectedClusters selects.
//
// Each assignment is cached in the push's model.XDSCache by cluster name,
// the DestinationRule the proxy sees for the service and, when that rule
// asks for locality load balancing, the proxy's locality and, with
// failoverPriority, its values of the listed labels (the priorities and
// weights are relative to them) and, in a multi-network mesh, the proxy's
// network and the gateway set (see SplitHorizon); it is dropped when the service's
// endpoints, the service or that rule change.
type Generator struct{}

var _ model.PartialGenerator = Generator{}

// Generate returns one assignment per name in w (EDS is never wildcard).
func (Generator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if w == nil {
		return nil, nil
	}
	cache := push.XDSCache()
	out := make(model.Resources, 0, w.Len())
	for n := range w.All() {
		r, err := assignment(proxy, push, cache, n)
		if err != nil {
			return nil, fmt.Errorf("eds for %s: cluster %s: %w", proxy.ID, n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// GenerateServices returns the assignments of the subscribed clusters of hosts.
func (Generator) GenerateServices(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, hosts map[string]struct{}) (model.Resources, error) {
	if w == nil {
		return nil, nil
	}
	cache := push.XDSCache()
	var out model.Resources
	for n := range w.All() {
		if _, ok := hosts[model.ResourceHost(n)]; !ok {
			continue
		}
		r, err := assignment(proxy, push, cache, n)
		if err != nil {
			return nil, fmt.Errorf("eds for %s: cluster %s: %w", proxy.ID, n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// assignment returns the marshalled assignment of cluster name, from the
// cache when it holds it.
func assignment(proxy *model.Proxy, push *model.PushContext, cache *model.XDSCache, name string) (*discovery.Resource, error) {
	t := resolve(proxy, push, name)
	if t.svc == nil {
		// Not a cluster of a known service: empty, cheap, not cached.
		cla, _ := t.build(proxy, push, name)
		return resource.Marshal(name, cla)
	}
	key := model.XDSCacheKey{Type: model.EndpointType, Name: name, Scope: t.locality.scope(proxy) + networkScope(proxy, push)}
	if t.dr != nil {
		key.Config = t.dr.Key()
	}
	if res, ok := cache.Get(key); ok {
		return res[0], nil
	}
	tok := cache.Token(push)
	deps := []model.ConfigKey{model.EndpointsDep(t.svc.Hostname), model.ServiceDep(t.svc.Hostname)}
	for _, src := range push.DestinationRuleSources(t.dr) {
		deps = append(deps, src.Key())
	}
	cla, labels := t.build(proxy, push, name)
	t.locality.apply(cla, proxy, labels)
	r, err := resource.Marshal(name, cla)
	if err != nil {
		return nil, err
	}
	cache.Add(key, deps, tok, []*discovery.Resource{r})
	return r, nil
}

// AffectedClusters returns, in the order of names, the cluster names whose
// endpoints req may have changed. For an endpoint-only request (not Full)
// those are the outbound clusters of the hostnames in req.ConfigsUpdated
// with kind model.KindEndpoints; for any other request every name is
// affected. The result is a partial update: a SotW transport must still
// send every subscribed assignment (see Generator).
func AffectedClusters(names []string, req *model.PushRequest) []string {
	if req == nil || req.Full {
		return names
	}
	hosts := map[string]bool{}
	for k := range req.ConfigsUpdated {
		if k.Kind == model.KindEndpoints {
			hosts[k.Name] = true
		}
	}
	var out []string
	for _, n := range names {
		if _, _, host, _, ok := clustername.Parse(n); ok && hosts[host] {
			out = append(out, n)
		}
	}
	return out
}
