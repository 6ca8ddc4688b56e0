package kube

import (
	"sort"

	"github.com/meshpilot/meshpilot/model"
)

// ServiceState is the current state of one Kubernetes service for
// Registry.Apply: Service nil means the service is gone.
type ServiceState struct {
	Hostname  string
	Service   *model.Service
	Endpoints []*model.Endpoint
}

// Apply updates only the services in states, leaving every other service
// as it is, and reports what changed: a service added, removed or redefined
// (KindService), or only its endpoints (KindEndpoints). It is the
// incremental counterpart of Replace, used by the informer controller.
func (r *Registry) Apply(states []ServiceState) model.RegistryChanges {
	if len(states) == 0 {
		return model.RegistryChanges{}
	}
	r.replaceMu.Lock()
	defer r.replaceMu.Unlock()
	r.mu.RLock()
	prev := make(map[string]*model.Service, len(states))
	for _, st := range states {
		if old := r.byHost[st.Hostname]; old != nil {
			prev[st.Hostname] = old
		}
	}
	r.mu.RUnlock()

	next := make(map[string]*model.Service, len(states))
	eps := make(map[string][]*model.Endpoint, len(states))
	for _, st := range states {
		if st.Service == nil {
			continue
		}
		svc := st.Service
		if old := prev[st.Hostname]; old != nil && model.ServiceEqual(old, svc) && old.ResourceVersion == svc.ResourceVersion {
			svc = old
		}
		next[st.Hostname] = svc
		eps[st.Hostname] = st.Endpoints
	}
	changes := model.ApplyRegistryState(r.endpoints, r.shard, prev, next, eps)
	if changes.Empty() && samePointers(prev, next) {
		return changes
	}

	r.mu.Lock()
	byHost := make(map[string]*model.Service, len(r.byHost)+len(next))
	for h, s := range r.byHost {
		byHost[h] = s
	}
	for _, st := range states {
		if s := next[st.Hostname]; s != nil {
			byHost[st.Hostname] = s
		} else {
			delete(byHost, st.Hostname)
		}
	}
	list := make([]*model.Service, 0, len(byHost))
	for _, s := range byHost {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Hostname < list[j].Hostname })
	r.byHost, r.services = byHost, list
	r.mu.Unlock()
	if !changes.Empty() {
		r.log.Debug("kubernetes registry updated", "services", len(list),
			"servicesChanged", len(changes.Services), "endpointsChanged", len(changes.Endpoints))
	}
	return changes
}

// Hostnames returns the hostnames the registry holds, sorted.
func (r *Registry) Hostnames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.services))
	for _, s := range r.services {
		out = append(out, s.Hostname)
	}
	return out
}

// samePointers reports whether next holds exactly the services of prev.
func samePointers(prev, next map[string]*model.Service) bool {
	if len(prev) != len(next) {
		return false
	}
	for h, s := range prev {
		if next[h] != s {
			return false
		}
	}
	return true
}
