package cluster

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
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
// fresh. A router with an AUTO_PASSTHROUGH server also gets each service's
// SNI-DNAT clusters (SNIDNATClusters), cached and dropped as its outbound ones.
//
// EnvoyFilter CLUSTER patches are applied to every cluster before it is
// marshalled (SIDECAR_OUTBOUND, or GATEWAY for routers; SIDECAR_INBOUND
// for inbound clusters), and the clusters they ADD come last; cache keys
// name the patches, so proxies with the same EnvoyFilters share entries.
type Generator struct {
	// EnvoyFilters receives what happens to EnvoyFilter patches.
	EnvoyFilters envoyfilter.Reporter
}

var _ model.PartialGenerator = Generator{}

// builtinKey caches BlackHoleCluster, PassthroughCluster and InboundPassthroughCluster.
var builtinKey = model.XDSCacheKey{Type: model.ClusterType, Name: "builtin"}

// Generate returns every cluster of proxy (CDS is always a full, wildcard
// answer: Envoy subscribes to all clusters): the outbound clusters in
// service hostname order, then the inbound and built-in clusters.
func (g Generator) Generate(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	cache := push.XDSCache()
	timeout := ConnectTimeout(push.Mesh)
	services := push.ServicesFor(proxy)
	out := make(model.Resources, 0, 2*len(services)+8)
	pt := newPatching(proxy, push, g.EnvoyFilters)
	sniDNAT := wantsSNIDNAT(proxy, push)
	for _, svc := range services {
		res, err := serviceResources(proxy, push, cache, svc, timeout, pt)
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
		if sniDNAT {
			if res, err = sniDNATResources(proxy, push, cache, svc, timeout, pt); err != nil {
				return nil, err
			}
			out = append(out, res...)
		}
	}
	inbound, err := InboundClusters(proxy, push, timeout)
	if err != nil {
		return nil, fmt.Errorf("cds for %s: %w", proxy.ID, err)
	}
	inbound = pt.patches.Clusters(envoyfilter.SidecarInbound, inbound)
	res, err := resource.MarshalAll(inbound, clusterName)
	if err != nil {
		return nil, fmt.Errorf("cds for %s: inbound: %w", proxy.ID, err)
	}
	out = append(out, res...)
	bKey := builtinKey
	bKey.EnvoyFilters = pt.key
	builtin, ok := cache.Get(bKey)
	if !ok {
		tok := cache.Token(push)
		if builtin, err = resource.MarshalAll(pt.patches.Clusters(pt.ctx, BuiltinClusters(timeout)), clusterName); err != nil {
			return nil, fmt.Errorf("cds for %s: built-in clusters: %w", proxy.ID, err)
		}
		cache.Add(bKey, nil, tok, builtin)
	}
	out = append(out, builtin...)
	return appendAdded(out, pt, nil)
}

// patching is the EnvoyFilter patches of one proxy's CDS answer: ctx is
// its outbound context and key the cache key part of its patches.
type patching struct {
	patches *envoyfilter.Patches
	ctx     envoyfilter.Context
	key     string
}

func newPatching(proxy *model.Proxy, push *model.PushContext, rep envoyfilter.Reporter) patching {
	ps := envoyfilter.For(proxy, push, rep)
	ctx := envoyfilter.ContextFor(proxy)
	return patching{patches: ps, ctx: ctx, key: ps.KeyFor(ctx, networking.EnvoyFilter_CLUSTER)}
}

// appendAdded appends the clusters CLUSTER ADD patches create, skipping
// names already served: all of them, or with hosts (a partial answer) those
// whose names belong to one of hosts (model.ResourceHost), which a partial
// push would otherwise remove.
func appendAdded(out model.Resources, pt patching, hosts map[string]struct{}) (model.Resources, error) {
	extra := pt.patches.AddedClusters(pt.ctx)
	if len(extra) == 0 {
		return out, nil
	}
	seen := make(map[string]bool, len(out))
	for _, r := range out {
		seen[r.GetName()] = true
	}
	for _, c := range extra {
		if _, ok := hosts[model.ResourceHost(c.GetName())]; (hosts != nil && !ok) || seen[c.GetName()] {
			continue
		}
		seen[c.GetName()] = true
		r, err := resource.Marshal(c.GetName(), c)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.GetName(), err)
		}
		out = append(out, r)
	}
	return out, nil
}

// GenerateServices returns the outbound clusters of the services in hosts
// the proxy sees (none for a host it does not see or that is gone).
func (g Generator) GenerateServices(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, hosts map[string]struct{}) (model.Resources, error) {
	cache := push.XDSCache()
	timeout := ConnectTimeout(push.Mesh)
	pt := newPatching(proxy, push, g.EnvoyFilters)
	var out model.Resources
	sniDNAT := wantsSNIDNAT(proxy, push)
	for h := range hosts {
		svc := push.VisibleService(proxy, h)
		if svc == nil {
			continue
		}
		res, err := serviceResources(proxy, push, cache, svc, timeout, pt)
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
		if sniDNAT {
			if res, err = sniDNATResources(proxy, push, cache, svc, timeout, pt); err != nil {
				return nil, err
			}
			out = append(out, res...)
		}
	}
	return appendAdded(out, pt, hosts)
}

// serviceResources returns the marshalled outbound clusters of svc for
// proxy, from the cache when it holds them.
func serviceResources(proxy *model.Proxy, push *model.PushContext, cache *model.XDSCache, svc *model.Service, timeout *durationpb.Duration,
	pt patching) (model.Resources, error) {
	return cachedClusters(proxy, push, cache, svc, "", pt, func(dr *model.Config) ([]*clusterv3.Cluster, error) {
		return ServiceClusters(push, svc, dr, timeout)
	})
}

// cachedClusters returns the marshalled clusters build makes of svc (with
// its DestinationRule for proxy), patched by pt, from the cache entry of
// svc in scope when there is one; the entry depends on what svc's
// outbound clusters depend on.
func cachedClusters(proxy *model.Proxy, push *model.PushContext, cache *model.XDSCache, svc *model.Service, scope string,
	pt patching, build func(dr *model.Config) ([]*clusterv3.Cluster, error)) (model.Resources, error) {
	dr := push.DestinationRuleFor(proxy, svc)
	key := model.XDSCacheKey{Type: model.ClusterType, Name: svc.Hostname, Scope: scope, EnvoyFilters: pt.key}
	if dr != nil {
		key.Config = dr.Key()
	}
	if res, ok := cache.Get(key); ok {
		return res, nil
	}
	tok := cache.Token(push)
	cs, err := build(dr)
	if err != nil {
		return nil, fmt.Errorf("cds for %s: %w", proxy.ID, err)
	}
	cs = pt.patches.Clusters(pt.ctx, cs)
	res, err := resource.MarshalAll(cs, clusterName)
	if err != nil {
		return nil, fmt.Errorf("cds for %s: service %s: %w", proxy.ID, svc.Hostname, err)
	}
	cache.Add(key, serviceDeps(push, svc, dr), tok, res)
	return res, nil
}

// wantsSNIDNAT reports whether proxy is a router with an AUTO_PASSTHROUGH
// server: it then also gets every visible service's SNI-DNAT clusters, as
// istiod sends them (not only those of the servers' hosts).
func wantsSNIDNAT(proxy *model.Proxy, push *model.PushContext) bool {
	return proxy.Type == model.Router && len(push.AutoPassthroughServers(proxy)) > 0
}

// sniDNATScope is the cache scope of SNI-DNAT clusters (see SNIDNATClusters).
const sniDNATScope = "sni-dnat"

// sniDNATResources returns the marshalled SNI-DNAT clusters of svc for
// proxy, from the cache when it holds them; they depend on what the
// service's outbound clusters depend on.
func sniDNATResources(proxy *model.Proxy, push *model.PushContext, cache *model.XDSCache, svc *model.Service, timeout *durationpb.Duration,
	pt patching) (model.Resources, error) {
	if svc.MeshExternal {
		return nil, nil
	}
	return cachedClusters(proxy, push, cache, svc, sniDNATScope, pt, func(dr *model.Config) ([]*clusterv3.Cluster, error) {
		return SNIDNATClusters(push, svc, dr, timeout)
	})
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
	for _, src := range push.DestinationRuleSources(dr) {
		deps = append(deps, src.Key())
	}
	return deps
}
