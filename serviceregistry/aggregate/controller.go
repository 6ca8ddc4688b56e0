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
// per hostname: the first registry's, with the addresses of the later
// Kubernetes definitions of other clusters (model.MergeClusters). The result
// is a new slice; the services are shared, but for merged ones.
func (c *Controller) Services() []*model.Service {
	seen := map[string]int{}
	var out []*model.Service
	var dups map[string][]*model.Service
	for _, r := range c.registries {
		for _, s := range r.Services() {
			if i, ok := seen[s.Hostname]; ok {
				if s.Registry == model.RegistryKubernetes && out[i].Registry == model.RegistryKubernetes {
					if dups == nil {
						dups = map[string][]*model.Service{}
					}
					dups[s.Hostname] = append(dups[s.Hostname], s)
				}
				continue
			}
			seen[s.Hostname] = len(out)
			out = append(out, s)
		}
	}
	for h, others := range dups {
		i := seen[h]
		out[i] = model.MergeClusters(out[i], others...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Hostname < out[j].Hostname })
	return out
}

// Service returns the service of hostname as Services does, or nil,
// without merging the registries' lists.
func (c *Controller) Service(hostname string) *model.Service {
	var first *model.Service
	var others []*model.Service
	for _, r := range c.registries {
		s := lookup(r, hostname)
		switch {
		case s == nil:
		case first == nil:
			first = s
		case s.Registry == model.RegistryKubernetes && first.Registry == model.RegistryKubernetes:
			others = append(others, s)
		}
	}
	if first == nil || others == nil {
		return first
	}
	return model.MergeClusters(first, others...)
}

// lookup returns the service of hostname in r, or nil.
func lookup(r model.ServiceDiscovery, hostname string) *model.Service {
	if l, ok := r.(model.ServiceLookup); ok {
		return l.Service(hostname)
	}
	list := r.Services()
	if i, found := sort.Find(len(list), func(i int) int { return strings.Compare(hostname, list[i].Hostname) }); found {
		return list[i]
	}
	return nil
}
