// Package aggregate merges several service registries into one view.
package aggregate

import (
	"sort"
	"strings"

	"github.com/meshpilot/meshpilot/model"
)

var (
	_ model.ServiceDiscovery = (*Controller)(nil)
	_ model.ServiceLookup    = (*Controller)(nil)
)

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

// Service returns the service of hostname from the first registry that
// defines it, or nil, without merging the registries' lists.
func (c *Controller) Service(hostname string) *model.Service {
	for _, r := range c.registries {
		if l, ok := r.(model.ServiceLookup); ok {
			if s := l.Service(hostname); s != nil {
				return s
			}
			continue
		}
		list := r.Services()
		if i, found := sort.Find(len(list), func(i int) int { return strings.Compare(hostname, list[i].Hostname) }); found {
			return list[i]
		}
	}
	return nil
}
