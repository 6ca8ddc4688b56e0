package serviceentry

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/meshpilot/meshpilot/model"
)

// ShardServiceEntry is the EndpointIndex shard this registry writes.
const ShardServiceEntry = "ServiceEntry"

// Registry serves the services and endpoints that the ServiceEntries and
// WorkloadEntries of a config store declare, with the Pods (SetPods) that
// workloadSelectors pick. Recompute re-reads the store and the Pods; Update
// re-reads only the objects of some keys and recomputes only the hosts they
// touch. Services returns an immutable snapshot. It is safe for concurrent
// use.
type Registry struct {
	domain    string
	store     model.ConfigStore
	endpoints *model.EndpointIndex
	log       *slog.Logger

	// recomputeMu serialises Recompute and Update, the only writers;
	// readers use the set's snapshots.
	recomputeMu sync.Mutex
	set         model.ServiceSet
	// pods answers workloadSelector lookups of Pods (nil: none); idx holds
	// the ServiceEntries and WorkloadEntries last read (nil before the
	// first Recompute). Both are guarded by recomputeMu.
	pods PodSource
	idx  *index
}

// NewRegistry returns a registry over store that writes endpoints into
// endpoints. It is empty until the first Recompute.
func NewRegistry(domain string, store model.ConfigStore, endpoints *model.EndpointIndex, log *slog.Logger) *Registry {
	return &Registry{domain: domain, store: store, endpoints: endpoints, log: log}
}

// SetPods makes src the source of the Pods that workloadSelectors select
// (nil: none), from the next Recompute on. Call Recompute after a change of
// the Pods when SelectsPods says it can matter (Update reads the Pods only
// for the hosts its keys touch).
func (r *Registry) SetPods(src PodSource) {
	r.recomputeMu.Lock()
	defer r.recomputeMu.Unlock()
	r.pods = src
}

// SelectsPods reports whether the last Recompute or Update saw a
// ServiceEntry with a workloadSelector, so that a change of Pods can change
// its endpoints.
func (r *Registry) SelectsPods() bool {
	r.recomputeMu.Lock()
	defer r.recomputeMu.Unlock()
	return r.idx != nil && r.idx.selects()
}

// Recompute re-reads every ServiceEntry and WorkloadEntry, and the Pods
// workloadSelectors pick, updates the endpoint index, and reports which
// services changed and which changed only their endpoints. When several
// ServiceEntries declare one host, the oldest defines the service and the
// endpoints of all of them are merged.
func (r *Registry) Recompute() model.RegistryChanges {
	r.recomputeMu.Lock()
	defer r.recomputeMu.Unlock()
	r.idx = newIndex()
	touched := map[string]struct{}{}
	entries := r.store.List(model.KindServiceEntry)
	for i := range entries {
		if !r.idx.putEntry(&entries[i], r.domain, touched) {
			r.log.Warn("config is not a ServiceEntry, ignored", "config", entries[i].Key().String(), "source", entries[i].Source)
		}
	}
	workloads := r.store.List(model.KindWorkloadEntry)
	for i := range workloads {
		r.idx.putWorkload(&workloads[i], nil)
	}
	for h := range r.set.ByHost() {
		touched[h] = struct{}{} // hosts that went
	}
	return r.recompute(touched, true)
}

// Update re-reads the ServiceEntries and WorkloadEntries of keys (keys of
// other kinds are ignored) and recomputes, with the current Pods, only the
// hosts that their old or new versions declare or select. It reports what
// Recompute would, and leaves the registry as Recompute would, provided
// nothing else changed since the last Recompute or Update: a change of the
// Pods needs a Recompute. Before the first Recompute it is one.
func (r *Registry) Update(keys []model.ConfigKey) model.RegistryChanges {
	r.recomputeMu.Lock()
	if r.idx == nil {
		r.recomputeMu.Unlock()
		return r.Recompute()
	}
	defer r.recomputeMu.Unlock()
	touched := map[string]struct{}{}
	var entries, workloads configLookup
	for _, k := range keys {
		ok := objKey{k.Namespace, k.Name}
		switch k.Kind {
		case model.KindServiceEntry:
			if cfg := entries.get(r.store, k); cfg == nil {
				r.idx.deleteEntry(ok, touched)
			} else if !r.idx.putEntry(cfg, r.domain, touched) {
				r.log.Warn("config is not a ServiceEntry, ignored", "config", k.String(), "source", cfg.Source)
			}
		case model.KindWorkloadEntry:
			if cfg := workloads.get(r.store, k); cfg == nil {
				r.idx.deleteWorkload(ok, touched)
			} else {
				r.idx.putWorkload(cfg, touched)
			}
		}
	}
	return r.recompute(touched, false)
}

// recompute rebuilds the services and endpoints of hosts from the index,
// writes them to the endpoint index and the set (all: hosts is every host,
// so the set is replaced rather than patched) and reports the changes.
func (r *Registry) recompute(hosts map[string]struct{}, all bool) model.RegistryChanges {
	current := r.set.ByHost()
	prev := make(map[string]*model.Service, len(hosts))
	next := make(map[string]*model.Service, len(hosts))
	eps := make(map[string][]*model.Endpoint, len(hosts))
	podEps := map[*entry][]*model.Endpoint{} // per ServiceEntry, asked once
	for h := range hosts {
		if old := current[h]; old != nil {
			prev[h] = old
		}
		declaring := r.idx.declaring(h)
		if len(declaring) == 0 {
			continue
		}
		svc := declaring[0].service(h)
		if old := current[h]; old != nil && model.ServiceEqual(old, svc) && old.ResourceVersion == svc.ResourceVersion {
			svc = old // keep pointers of unchanged services stable
		}
		next[h] = svc
		seen := map[string]bool{}
		for i, e := range declaring {
			if i > 0 && r.log.Enabled(context.Background(), slog.LevelDebug) {
				r.log.Debug("host declared by several ServiceEntries; merging endpoints", "hostname", h,
					"serviceEntry", e.cfg.Namespace+"/"+e.cfg.Name, "definedBy", svc.Namespace+"/"+svc.Name)
			}
			var selected []*model.Config
			if sel := e.se.GetWorkloadSelector(); sel != nil {
				selected = r.idx.selectWorkloads(e.cfg.Namespace, sel.GetLabels())
				if _, done := podEps[e]; !done {
					podEps[e] = PodEndpoints(e.cfg, r.pods)
				}
			}
			for _, ep := range append(entryEndpoints(e.cfg, e.se, h, selected), podEps[e]...) {
				if k := ep.Key(); !seen[k] {
					seen[k] = true
					eps[h] = append(eps[h], ep)
				}
			}
		}
	}
	changes := model.ApplyRegistryState(r.endpoints, ShardServiceEntry, prev, next, eps)
	if all {
		r.set.Set(next)
	} else {
		patch := make(map[string]*model.Service, len(hosts))
		for h := range hosts {
			if next[h] != current[h] {
				patch[h] = next[h]
			}
		}
		r.set.Patch(patch)
	}
	if !changes.Empty() {
		r.log.Debug("service entry registry updated", "services", len(r.set.Services()), "hostsRecomputed", len(hosts),
			"servicesChanged", len(changes.Services), "endpointsChanged", len(changes.Endpoints))
	}
	return changes
}

// configLookup finds objects of one kind in a store's List, read once.
type configLookup struct {
	list []model.Config
	read bool
}

// get returns the object of k in store, or nil.
func (l *configLookup) get(store model.ConfigStore, k model.ConfigKey) *model.Config {
	if !l.read {
		l.list, l.read = store.List(k.Kind), true
	}
	i, found := slices.BinarySearchFunc(l.list, k, func(c model.Config, k model.ConfigKey) int {
		return cmp.Or(cmp.Compare(c.Namespace, k.Namespace), cmp.Compare(c.Name, k.Name))
	})
	if !found {
		return nil
	}
	// A copy: the index must not keep the store's whole list alive.
	c := l.list[i]
	return &c
}

// Services returns every service sorted by hostname. The slice is a
// snapshot that later Recompute calls do not touch; it must not be changed.
func (r *Registry) Services() []*model.Service { return r.set.Services() }

// Service returns the service with the given hostname, or nil.
func (r *Registry) Service(hostname string) *model.Service { return r.set.Service(hostname) }
