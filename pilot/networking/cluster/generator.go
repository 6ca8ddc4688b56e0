package cluster

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/resource"
)

// Generator serves CDS. It is stateless; the zero value is ready to use.
//
// The outbound clusters of a service are cached as one group in the push's
// model.XDSCache, keyed by the service hostname and the DestinationRule the
// proxy sees for it (Istio's precedence makes that depend on the proxy's
// namespace), and dropped when the service, that rule, or (for DNS
// services, whose clusters list their endpoints, and ISTIO_MUTUAL rules,
// whose clusters name the service accounts) the service's endpoints change,
// and, when auto-mTLS may apply, when any PeerAuthentication changes or
// the service's endpoints change. The built-in clusters are cached under one key that only a
// mesh-wide invalidation drops. Inbound clusters are per proxy and built
// fresh.
type Generator struct{}

var _ model.PartialGenerator = Generator{}

// builtinKey caches BlackHoleCluster, PassthroughCluster and InboundPassthroughCluster.
var builtinKey = model.XDSCacheKey{Type: model.ClusterType, Name: "builtin"}

// Generate returns every cluster of proxy (CDS is always a full, wildcard
// answer: Envoy subscribes to all clusters): the outbound clusters in
// service hostname order, then the inbound and built-in clusters.
func (Generator) Generate(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	cache := push.XDSCache()
	timeout := ConnectTimeout(push.Mesh)
	services := push.ServicesFor(proxy)
	out := make(model.Resources, 0, 2*len(services)+8)
	for _, svc := range services {
		res, err := serviceResources(proxy, push, cache, svc, timeout)
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	inbound, err := InboundClusters(proxy, push, timeout)
	if err != nil {
		return nil, fmt.Errorf("cds for %s: %w", proxy.ID, err)
	}
	res, err := resource.MarshalAll(inbound, clusterName)
	if err != nil {
		return nil, fmt.Errorf("cds for %s: inbound: %w", proxy.ID, err)
	}
	out = append(out, res...)
	builtin, ok := cache.Get(builtinKey)
	if !ok {
		tok := cache.Token(push)
		if builtin, err = resource.MarshalAll(BuiltinClusters(timeout), clusterName); err != nil {
			return nil, fmt.Errorf("cds for %s: built-in clusters: %w", proxy.ID, err)
		}
		cache.Add(builtinKey, nil, tok, builtin)
	}
	return append(out, builtin...), nil
}

// GenerateServices returns the outbound clusters of the services in hosts
// the proxy sees (none for a host it does not see or that is gone).
func (Generator) GenerateServices(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, hosts map[string]struct{}) (model.Resources, error) {
	cache := push.XDSCache()
	timeout := ConnectTimeout(push.Mesh)
	var out model.Resources
	for h := range hosts {
		svc := push.VisibleService(proxy, h)
		if svc == nil {
			continue
		}
		res, err := serviceResources(proxy, push, cache, svc, timeout)
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	return out, nil
}

// serviceResources returns the marshalled outbound clusters of svc for
// proxy, from the cache when it holds them.
func serviceResources(proxy *model.Proxy, push *model.PushContext, cache *model.XDSCache, svc *model.Service, timeout *durationpb.Duration) (model.Resources, error) {
	dr := push.DestinationRuleFor(proxy, svc)
	key := model.XDSCacheKey{Type: model.ClusterType, Name: svc.Hostname}
	if dr != nil {
		key.Config = dr.Key()
	}
	if res, ok := cache.Get(key); ok {
		return res, nil
	}
	tok := cache.Token(push)
	cs, err := ServiceClusters(push, svc, dr, timeout)
	if err != nil {
		return nil, fmt.Errorf("cds for %s: %w", proxy.ID, err)
	}
	res, err := resource.MarshalAll(cs, clusterName)
	if err != nil {
		return nil, fmt.Errorf("cds for %s: service %s: %w", proxy.ID, svc.Hostname, err)
	}
	cache.Add(key, serviceDeps(push, svc, dr), tok, res)
	return res, nil
}

// rule is the DestinationRule of dr, nil for none.
func rule(dr *model.Config) *networking.DestinationRule {
	if dr == nil {
		return nil
	}
	r, _ := dr.Spec.(*networking.DestinationRule)
	return r
}

func clusterName(c *clusterv3.Cluster) string { return c.GetName() }

// serviceDeps is what a service's clusters depend on besides the mesh.
func serviceDeps(push *model.PushContext, svc *model.Service, dr *model.Config) []model.ConfigKey {
	deps := make([]model.ConfigKey, 0, 4)
	deps = append(deps, model.ServiceDep(svc.Hostname))
	// The endpoints shape clusters too (service accounts, target ports, a
	// DNS service's addresses), but registries report such endpoint
	// changes as changes of the service (model.ClusterInputsEqual), so
	// endpoint churn alone leaves cached clusters alone.
	if mayAutoMTLS(push, svc) {
		deps = append(deps, model.DependsOnAll(model.KindPeerAuthentication))
	}
	if dr != nil {
		deps = append(deps, dr.Key())
	}
	return deps
}
