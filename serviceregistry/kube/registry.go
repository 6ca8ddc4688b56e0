package kube

import (
	"log/slog"
	"sync"

	"github.com/meshpilot/meshpilot/model"
)

// ShardKubernetes is the EndpointIndex shard this registry writes.
const ShardKubernetes = "Kubernetes"

var _ model.ServiceDiscovery = (*Registry)(nil)

// Registry is a static service registry over a set of Kubernetes objects
// (manifest files, or what informers hold). Replace swaps the whole set;
// Services returns an immutable snapshot. It is safe for concurrent use.
type Registry struct {
	domain    string
	shard     string
	endpoints *model.EndpointIndex
	log       *slog.Logger
	networks  *Networks
	// cluster is the ClusterID its endpoints carry.
	cluster string

	// replaceMu serialises Replace and Apply, the only writers; readers use
	// the set's snapshots, so conversion does not block them.
	replaceMu sync.Mutex
	set       model.ServiceSet
}

// NewRegistry returns an empty registry for cluster domain domain
// ("cluster.local") that writes endpoints into endpoints.
func NewRegistry(domain string, endpoints *model.EndpointIndex, log *slog.Logger) *Registry {
	return NewRegistryForShard(domain, ShardKubernetes, endpoints, log)
}

// NewRegistryForShard is NewRegistry writing endpoints under shard, so two
// registries (manifest files and informers) can share one EndpointIndex.
func NewRegistryForShard(domain, shard string, endpoints *model.EndpointIndex, log *slog.Logger) *Registry {
	return &Registry{domain: domain, shard: shard, endpoints: endpoints, log: log}
}

// SetNetworks makes later Replace calls resolve endpoint networks with n
// (see Networks); call it before the first Replace.
func (r *Registry) SetNetworks(n *Networks) {
	r.replaceMu.Lock()
	defer r.replaceMu.Unlock()
	r.networks = n
}

// SetClusterID makes the endpoints of later Replace calls carry id as
// their ClusterID; call it before the first Replace.
func (r *Registry) SetClusterID(id string) { r.cluster = id }

// Replace makes objs the registry's whole object set, updates the endpoint
// index, and reports which services changed and which changed only their
// endpoints.
func (r *Registry) Replace(objs Objects) model.RegistryChanges {
	idx := NewClusterIndex(objs, r.cluster).WithNetworks(r.networks)
	next := make(map[string]*model.Service, len(objs.Services))
	eps := make(map[string][]*model.Endpoint, len(objs.Services))

	r.replaceMu.Lock()
	defer r.replaceMu.Unlock()
	prev := r.set.ByHost()
	for _, ks := range objs.Services {
		svc := ConvertService(ks, r.domain)
		svc.ClusterID = r.cluster
		if _, dup := next[svc.Hostname]; dup {
			r.log.Warn("duplicate service ignored", "service", svc.Namespace+"/"+svc.Name, "hostname", svc.Hostname)
			continue
		}
		// Keep the previous value when nothing changed, so pointers stay stable.
		if old := prev[svc.Hostname]; old != nil && model.ServiceEqual(old, svc) && old.ResourceVersion == svc.ResourceVersion {
			svc = old
		}
		next[svc.Hostname] = svc
		eps[svc.Hostname] = idx.Endpoints(ks)
	}
	changes := model.ApplyRegistryState(r.endpoints, r.shard, prev, next, eps)
	r.set.Set(next)
	if !changes.Empty() {
		r.log.Debug("kubernetes registry updated", "services", len(next),
			"servicesChanged", len(changes.Services), "endpointsChanged", len(changes.Endpoints))
	}
	return changes
}

// Services returns every service sorted by hostname. The slice is a
// snapshot that later Replace calls do not touch; it must not be changed.
func (r *Registry) Services() []*model.Service { return r.set.Services() }

// Service returns the service with the given hostname, or nil.
func (r *Registry) Service(hostname string) *model.Service { return r.set.Service(hostname) }
