package serviceentry

import (
	"log/slog"
	"slices"
	"sync"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// ShardServiceEntry is the EndpointIndex shard this registry writes.
const ShardServiceEntry = "ServiceEntry"

// Registry serves the services and endpoints that the ServiceEntries and
// WorkloadEntries of a config store declare, with the Pods (SetPods) that
// workloadSelectors pick. Recompute re-reads the store and the Pods;
// Services returns an immutable snapshot. It is safe for concurrent use.
type Registry struct {
	domain    string
	store     model.ConfigStore
	endpoints *model.EndpointIndex
	log       *slog.Logger

	// recomputeMu serialises Recompute, the only writer; readers use the
	// set's snapshots.
	recomputeMu sync.Mutex
	set         model.ServiceSet
	// pods answers workloadSelector lookups of Pods (nil: none); selects
	// says the last Recompute saw a ServiceEntry with a workloadSelector.
	// Both are guarded by recomputeMu.
	pods    PodSource
	selects bool
}

// NewRegistry returns a registry over store that writes endpoints into
// endpoints. It is empty until the first Recompute.
func NewRegistry(domain string, store model.ConfigStore, endpoints *model.EndpointIndex, log *slog.Logger) *Registry {
	return &Registry{domain: domain, store: store, endpoints: endpoints, log: log}
}

// SetPods makes src the source of the Pods that workloadSelectors select
// (nil: none), from the next Recompute on. Call Recompute after a change of
// the Pods when SelectsPods says it can matter.
func (r *Registry) SetPods(src PodSource) {
	r.recomputeMu.Lock()
	defer r.recomputeMu.Unlock()
	r.pods = src
}

// SelectsPods reports whether the last Recompute saw a ServiceEntry with a
// workloadSelector, so that a change of Pods can change its endpoints.
func (r *Registry) SelectsPods() bool {
	r.recomputeMu.Lock()
	defer r.recomputeMu.Unlock()
	return r.selects
}

// Recompute re-reads every ServiceEntry and WorkloadEntry, and the Pods
// workloadSelectors pick, updates the endpoint index, and reports which
// services changed and which changed only their endpoints. When several
// ServiceEntries declare one host, the oldest defines the service and the
// endpoints of all of them are merged.
func (r *Registry) Recompute() model.RegistryChanges {
	r.recomputeMu.Lock()
	defer r.recomputeMu.Unlock()
	current := r.set.ByHost()

	entries := slices.Clone(r.store.List(model.KindServiceEntry))
	// Oldest first; the store's namespace/name order breaks ties.
	slices.SortStableFunc(entries, func(a, b model.Config) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp)
	})
	workloads := r.store.List(model.KindWorkloadEntry)

	next := map[string]*model.Service{}
	eps := map[string][]*model.Endpoint{}
	seen := map[string]map[string]bool{} // host → endpoint keys already merged
	r.selects = false
	for i := range entries {
		cfg := &entries[i]
		se, ok := cfg.Spec.(*networking.ServiceEntry)
		if !ok {
			r.log.Warn("config is not a ServiceEntry, ignored", "config", cfg.Key().String(), "source", cfg.Source)
			continue
		}
		var podEps []*model.Endpoint
		if se.GetWorkloadSelector() != nil {
			r.selects = true
			podEps = PodEndpoints(cfg, r.pods)
		}
		for _, svc := range Convert(cfg, r.domain) {
			if prev, dup := next[svc.Hostname]; !dup {
				if old := current[svc.Hostname]; old != nil && model.ServiceEqual(old, svc) && old.ResourceVersion == svc.ResourceVersion {
					svc = old // keep pointers of unchanged services stable
				}
				next[svc.Hostname] = svc
				seen[svc.Hostname] = map[string]bool{}
			} else if prev.Namespace != cfg.Namespace || prev.Name != cfg.Name {
				r.log.Debug("host declared by several ServiceEntries; merging endpoints", "hostname", svc.Hostname,
					"serviceEntry", cfg.Namespace+"/"+cfg.Name, "definedBy", prev.Namespace+"/"+prev.Name)
			}
			for _, e := range append(Endpoints(cfg, svc, workloads), podEps...) {
				if k := e.Key(); !seen[svc.Hostname][k] {
					seen[svc.Hostname][k] = true
					eps[svc.Hostname] = append(eps[svc.Hostname], e)
				}
			}
		}
	}
	changes := model.ApplyRegistryState(r.endpoints, ShardServiceEntry, current, next, eps)
	r.set.Set(next)
	if !changes.Empty() {
		r.log.Debug("service entry registry updated", "services", len(next),
			"servicesChanged", len(changes.Services), "endpointsChanged", len(changes.Endpoints))
	}
	return changes
}

// Services returns every service sorted by hostname. The slice is a
// snapshot that later Recompute calls do not touch; it must not be changed.
func (r *Registry) Services() []*model.Service { return r.set.Services() }

// Service returns the service with the given hostname, or nil.
func (r *Registry) Service(hostname string) *model.Service { return r.set.Service(hostname) }
