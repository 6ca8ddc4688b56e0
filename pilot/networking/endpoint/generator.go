package endpoint

import (
	"fmt"
	"sort"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// Generator serves EDS. It is stateless; the zero value is ready to use.
//
// Generate always returns the assignment of every subscribed cluster, sorted
// by name, whatever the request: that is a complete State-of-the-World
// answer. For an endpoint-only push a transport that sends incremental
// (Delta) updates may send only the clusters AffectedClusters selects.
type Generator struct{}

var _ model.Generator = Generator{}

// Generate returns one assignment per name in w (EDS is never wildcard).
func (Generator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if w == nil {
		return nil, nil
	}
	names := w.Names()
	sort.Strings(names)
	out := make(model.Resources, 0, len(names))
	for _, cla := range Build(proxy, push, names) {
		r, err := cluster.Resource(cla.ClusterName, cla)
		if err != nil {
			return nil, fmt.Errorf("eds for %s: cluster %s: %w", proxy.ID, cla.ClusterName, err)
		}
		out = append(out, r)
	}
	return out, nil
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
		if _, _, host, _, ok := cluster.ParseName(n); ok && hosts[host] {
			out = append(out, n)
		}
	}
	return out
}
