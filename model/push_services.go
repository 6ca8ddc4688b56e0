package model

import (
	"maps"
	"slices"
	"sort"
	"strings"
)

// incrementalServiceLimit is the most changed services for which the
// service index is patched rather than rebuilt.
const incrementalServiceLimit = 64

// changedHostnames returns the hostnames of req's KindService keys and
// whether only services changed in the service index's terms: every key
// that touches services is a KindService key (ServiceEntry and
// WorkloadEntry sources report the services they changed as KindService
// keys too), and there are at most incrementalServiceLimit of them.
func changedHostnames(req *PushRequest) (map[string]struct{}, bool) {
	hosts := map[string]struct{}{}
	for k := range req.ConfigsUpdated {
		switch k.Kind {
		case KindService:
			hosts[k.Name] = struct{}{}
		case KindServiceEntry, KindWorkloadEntry:
			// Their services are keyed separately; WorkloadEntries change endpoints only.
		}
	}
	return hosts, len(hosts) > 0 && len(hosts) <= incrementalServiceLimit
}

// patchServices builds the service index from prev's by replacing, adding
// or removing only the changed hostnames (copy on write: prev is not
// changed). It gives the same result as initServices.
func (pc *PushContext) patchServices(env *Environment, prev *PushContext, changed map[string]struct{}) {
	current := currentServices(env.ServiceDiscovery, changed)
	byHost := maps.Clone(prev.servicesByHost)
	list := slices.Clone(prev.services)
	for h := range changed {
		i, found := sort.Find(len(list), func(i int) int { return strings.Compare(h, list[i].Hostname) })
		s, exists := current[h]
		switch {
		case exists && found:
			list[i] = s
			byHost[h] = s
		case exists:
			list = slices.Insert(list, i, s)
			byHost[h] = s
		case found:
			list = slices.Delete(list, i, i+1)
			delete(byHost, h)
		}
	}
	pc.services, pc.servicesByHost = list, byHost
	// Kept once set (a removed merge only costs cache sharing).
	pc.clusterVIPs = prev.clusterVIPs
	for _, s := range current {
		if s.ClusterVIPs != nil {
			pc.clusterVIPs = true
		}
	}
}

// currentServices returns the services sd defines for hostnames: by
// lookup when sd can, else from its list.
func currentServices(sd ServiceDiscovery, hostnames map[string]struct{}) map[string]*Service {
	current := make(map[string]*Service, len(hostnames))
	if lookup, ok := sd.(ServiceLookup); ok {
		for h := range hostnames {
			if s := lookup.Service(h); s != nil {
				current[h] = s
			}
		}
		return current
	}
	for _, s := range sd.Services() {
		if _, ok := hostnames[s.Hostname]; !ok {
			continue
		}
		// The first registry to define a hostname wins (Kubernetes before ServiceEntry).
		if _, dup := current[s.Hostname]; !dup {
			current[s.Hostname] = s
		}
	}
	return current
}
