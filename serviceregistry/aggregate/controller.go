// Package aggregate merges several service registries into one view.
package aggregate

import (
	"sort"

	"github.com/meshpilot/meshpilot/model"
)

var _ model.ServiceDiscovery = (*Controller)(nil)

// Controller is a model.ServiceDiscovery over an ordered list of registries.
// It holds no state of its own, so it is as safe for concurrent use as the
// registries it merges.
type Controller struct {
	registries []model.ServiceDiscovery
}

// New returns a view of registries. On a hostname several registries
// define, the earlier registry wins (pass Kubernetes before ServiceEntry).
func New(registries ...model.ServiceDiscovery) *Controller {
	return &Controller{registries: append([]model.ServiceDiscovery(nil), registries...)}
}

// Services returns the services of every registry, sorted by hostname, one
// per hostname. The result is a new slice; the services are shared.
func (c *Controller) Services() []*model.Service {
	seen := map[string]bool{}
	var out []*model.Service
	for _, r := range c.registries {
		for _, s := range r.Services() {
			if seen[s.Hostname] {
				continue
			}
			seen[s.Hostname] = true
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Hostname < out[j].Hostname })
	return out
}
