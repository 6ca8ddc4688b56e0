package kube

import (
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
	current := r.set.ByHost()
	prev := make(map[string]*model.Service, len(states))
	for _, st := range states {
		if old := current[st.Hostname]; old != nil {
			prev[st.Hostname] = old
		}
	}

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

	byHost := make(map[string]*model.Service, len(current)+len(next))
	for h, s := range current {
		byHost[h] = s
	}
	for _, st := range states {
		if s := next[st.Hostname]; s != nil {
			byHost[st.Hostname] = s
		} else {
			delete(byHost, st.Hostname)
		}
	}
	r.set.Set(byHost)
	if !changes.Empty() {
		r.log.Debug("kubernetes registry updated", "services", len(byHost),
			"servicesChanged", len(changes.Services), "endpointsChanged", len(changes.Endpoints))
	}
	return changes
}

// Hostnames returns the hostnames the registry holds, sorted.
func (r *Registry) Hostnames() []string {
	services := r.set.Services()
	out := make([]string, 0, len(services))
	for _, s := range services {
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
