package envoyfilter

import (
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	networking "istio.io/api/networking/v1alpha3"
)

// Cluster returns c patched for ctx: c itself when nothing applies, a
// patched copy otherwise, ok false when a patch removes it. c is not changed.
func (ps *Patches) Cluster(ctx Context, c *clusterv3.Cluster) (out *clusterv3.Cluster, ok bool) {
	if ps == nil {
		return c, true
	}
	var steps []*patch
	for _, p := range ps.of(ctx, networking.EnvoyFilter_CLUSTER) {
		if p.op != opAdd && clusterMatches(c.GetName(), p.match.GetCluster()) {
			steps = append(steps, p)
		}
	}
	return run(ps, "cluster "+c.GetName(), c, steps, func(c *clusterv3.Cluster, p *patch, b *batch) (outcome, error) {
		if !clusterMatches(c.GetName(), p.match.GetCluster()) {
			return unchanged, nil
		}
		if p.op == opRemove {
			return removed, nil
		}
		if err := mergeWhole(c, p, b); err != nil {
			return unchanged, err
		}
		return changed, nil
	})
}

// Clusters patches cs for ctx (see Cluster) and drops removed ones.
func (ps *Patches) Clusters(ctx Context, cs []*clusterv3.Cluster) []*clusterv3.Cluster {
	if !ps.Has(ctx, networking.EnvoyFilter_CLUSTER) {
		return cs
	}
	out := make([]*clusterv3.Cluster, 0, len(cs))
	for _, c := range cs {
		if pc, ok := ps.Cluster(ctx, c); ok {
			out = append(out, pc)
		}
	}
	return out
}

// AddedClusters returns the clusters CLUSTER ADD patches of ctx create.
func (ps *Patches) AddedClusters(ctx Context) []*clusterv3.Cluster {
	return added[*clusterv3.Cluster](ps, ps.of(ctx, networking.EnvoyFilter_CLUSTER), "new cluster")
}

// ExtensionConfigs returns the extension configs EXTENSION_CONFIG ADD
// patches create, in patch order, whatever their match context (istiod
// reads none for them): the ECDS generator serves those a proxy asks for by
// name, for filters whose config_discovery names them.
func (ps *Patches) ExtensionConfigs() []*corev3.TypedExtensionConfig {
	if ps == nil {
		return nil
	}
	return added[*corev3.TypedExtensionConfig](ps, ps.byApply[networking.EnvoyFilter_EXTENSION_CONFIG], "new extension config")
}

// clusterMatches checks match.cluster against a cluster name; service,
// portNumber and subset are read from "outbound|PORT|SUBSET|HOST".
func clusterMatches(name string, m *networking.EnvoyFilter_ClusterMatch) bool {
	if m == nil {
		return true
	}
	if m.GetName() != "" {
		return m.GetName() == name
	}
	if m.GetService() == "" && m.GetPortNumber() == 0 && m.GetSubset() == "" {
		return true
	}
	parts := strings.Split(name, "|")
	if len(parts) != 4 || parts[0] != "outbound" {
		return false
	}
	if m.GetSubset() != "" && m.GetSubset() != parts[2] {
		return false
	}
	if m.GetService() != "" && m.GetService() != parts[3] {
		return false
	}
	if m.GetPortNumber() != 0 && strconv.FormatUint(uint64(m.GetPortNumber()), 10) != parts[1] {
		return false
	}
	return true
}
