package cluster

import (
	"fmt"

	"github.com/meshpilot/meshpilot/model"
)

// Generator serves CDS. It is stateless; the zero value is ready to use.
type Generator struct{}

var _ model.Generator = Generator{}

// Generate returns every cluster of proxy (CDS is always a full, wildcard
// answer: Envoy subscribes to all clusters).
func (Generator) Generate(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	clusters, err := Build(proxy, push)
	if err != nil {
		return nil, fmt.Errorf("cds for %s: %w", proxy.ID, err)
	}
	out := make(model.Resources, 0, len(clusters))
	for _, c := range clusters {
		r, err := Resource(c.Name, c)
		if err != nil {
			return nil, fmt.Errorf("cds for %s: cluster %s: %w", proxy.ID, c.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}
