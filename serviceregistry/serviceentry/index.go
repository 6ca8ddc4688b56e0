package serviceentry

import (
	"cmp"
	"slices"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// objKey names an object within one kind.
type objKey struct{ namespace, name string }

func keyOf(c *model.Config) objKey { return objKey{c.Namespace, c.Name} }

// entry is a ServiceEntry as the registry last read it.
type entry struct {
	cfg *model.Config
	se  *networking.ServiceEntry
	// services are Convert's, one per distinct host, in spec order.
	services []*model.Service
}

// label is one key=value pair of a WorkloadEntry's labels.
type label struct{ key, value string }

// nsWorkloads are the WorkloadEntries of one namespace, by name and by label.
type nsWorkloads struct {
	byName  map[string]*model.Config
	byLabel map[label]map[string]struct{}
}

// index holds the ServiceEntries and WorkloadEntries the registry last read,
// indexed so that a change finds the hosts it touches and a workloadSelector
// finds its WorkloadEntries in O(matching) rather than O(all). It is not
// safe for concurrent use (the registry's recomputeMu guards it).
type index struct {
	entries map[objKey]*entry
	// hosts maps a hostname to the ServiceEntries that declare it.
	hosts map[string]map[objKey]struct{}
	// selecting maps a namespace to its ServiceEntries with a workloadSelector.
	selecting map[string]map[objKey]struct{}
	workloads map[string]*nsWorkloads
}

func newIndex() *index {
	return &index{
		entries:   map[objKey]*entry{},
		hosts:     map[string]map[objKey]struct{}{},
		selecting: map[string]map[objKey]struct{}{},
		workloads: map[string]*nsWorkloads{},
	}
}

// selects reports whether some ServiceEntry has a workloadSelector.
func (x *index) selects() bool { return len(x.selecting) > 0 }

// putEntry indexes ServiceEntry cfg (replacing the one of its key) and adds
// the hosts of both versions to touched. A cfg whose Spec is not a
// ServiceEntry is removed; it reports false for it.
func (x *index) putEntry(cfg *model.Config, domain string, touched map[string]struct{}) bool {
	k := keyOf(cfg)
	x.deleteEntry(k, touched)
	se, ok := cfg.Spec.(*networking.ServiceEntry)
	if !ok || se == nil {
		return false
	}
	e := &entry{cfg: cfg, se: se}
	seen := map[string]bool{}
	for _, svc := range Convert(cfg, domain) {
		if seen[svc.Hostname] {
			continue
		}
		seen[svc.Hostname] = true
		e.services = append(e.services, svc)
		set := x.hosts[svc.Hostname]
		if set == nil {
			set = map[objKey]struct{}{}
			x.hosts[svc.Hostname] = set
		}
		set[k] = struct{}{}
		touched[svc.Hostname] = struct{}{}
	}
	x.entries[k] = e
	if se.GetWorkloadSelector() != nil {
		set := x.selecting[k.namespace]
		if set == nil {
			set = map[objKey]struct{}{}
			x.selecting[k.namespace] = set
		}
		set[k] = struct{}{}
	}
	return true
}

// deleteEntry removes the ServiceEntry k and adds its hosts to touched.
func (x *index) deleteEntry(k objKey, touched map[string]struct{}) {
	e := x.entries[k]
	if e == nil {
		return
	}
	delete(x.entries, k)
	for _, svc := range e.services {
		touched[svc.Hostname] = struct{}{}
		if set := x.hosts[svc.Hostname]; set != nil {
			delete(set, k)
			if len(set) == 0 {
				delete(x.hosts, svc.Hostname)
			}
		}
	}
	if set := x.selecting[k.namespace]; set != nil {
		delete(set, k)
		if len(set) == 0 {
			delete(x.selecting, k.namespace)
		}
	}
}

// putWorkload indexes WorkloadEntry cfg (replacing the one of its key) and
// adds to touched the hosts of the ServiceEntries that select either version.
func (x *index) putWorkload(cfg *model.Config, touched map[string]struct{}) {
	x.deleteWorkload(keyOf(cfg), touched)
	we, ok := cfg.Spec.(*networking.WorkloadEntry)
	if !ok || we == nil {
		return
	}
	ns := x.workloads[cfg.Namespace]
	if ns == nil {
		ns = &nsWorkloads{byName: map[string]*model.Config{}, byLabel: map[label]map[string]struct{}{}}
		x.workloads[cfg.Namespace] = ns
	}
	ns.byName[cfg.Name] = cfg
	for k, v := range we.GetLabels() {
		l := label{k, v}
		set := ns.byLabel[l]
		if set == nil {
			set = map[string]struct{}{}
			ns.byLabel[l] = set
		}
		set[cfg.Name] = struct{}{}
	}
	x.touchSelecting(cfg.Namespace, we.GetLabels(), touched)
}

// deleteWorkload removes the WorkloadEntry k and adds to touched the hosts
// of the ServiceEntries that selected it.
func (x *index) deleteWorkload(k objKey, touched map[string]struct{}) {
	ns := x.workloads[k.namespace]
	if ns == nil {
		return
	}
	cfg := ns.byName[k.name]
	if cfg == nil {
		return
	}
	delete(ns.byName, k.name)
	labels := cfg.Spec.(*networking.WorkloadEntry).GetLabels()
	for key, v := range labels {
		l := label{key, v}
		if set := ns.byLabel[l]; set != nil {
			delete(set, k.name)
			if len(set) == 0 {
				delete(ns.byLabel, l)
			}
		}
	}
	if len(ns.byName) == 0 {
		delete(x.workloads, k.namespace)
	}
	x.touchSelecting(k.namespace, labels, touched)
}

// touchSelecting adds to touched (nil: none) the hosts of the
// ServiceEntries of ns whose workloadSelector matches labels.
func (x *index) touchSelecting(ns string, labels map[string]string, touched map[string]struct{}) {
	if touched == nil {
		return
	}
	for k := range x.selecting[ns] {
		e := x.entries[k]
		if !selects(e.se.GetWorkloadSelector().GetLabels(), labels) {
			continue
		}
		for _, svc := range e.services {
			touched[svc.Hostname] = struct{}{}
		}
	}
}

// selectWorkloads returns the WorkloadEntries of ns whose labels include
// every label of selector, sorted by name (the store's order).
func (x *index) selectWorkloads(ns string, selector map[string]string) []*model.Config {
	w := x.workloads[ns]
	if w == nil {
		return nil
	}
	var out []*model.Config
	if len(selector) == 0 {
		for _, c := range w.byName {
			out = append(out, c)
		}
	} else {
		// Walk the smallest posting list of the selector's labels.
		var smallest map[string]struct{}
		for k, v := range selector {
			set := w.byLabel[label{k, v}]
			if len(set) == 0 {
				return nil
			}
			if smallest == nil || len(set) < len(smallest) {
				smallest = set
			}
		}
		for name := range smallest {
			c := w.byName[name]
			if selects(selector, c.Spec.(*networking.WorkloadEntry).GetLabels()) {
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b *model.Config) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// declaring returns the ServiceEntries that declare host, oldest first
// (ties by namespace, then name: the store's order), with the service each
// made of host.
func (x *index) declaring(host string) []*entry {
	out := make([]*entry, 0, len(x.hosts[host]))
	for k := range x.hosts[host] {
		out = append(out, x.entries[k])
	}
	slices.SortFunc(out, func(a, b *entry) int {
		return cmp.Or(a.cfg.CreationTimestamp.Compare(b.cfg.CreationTimestamp),
			cmp.Compare(a.cfg.Namespace, b.cfg.Namespace), cmp.Compare(a.cfg.Name, b.cfg.Name))
	})
	return out
}

// service returns the service e made of host (nil if none).
func (e *entry) service(host string) *model.Service {
	for _, s := range e.services {
		if s.Hostname == host {
			return s
		}
	}
	return nil
}
