package model

import (
	"slices"
	"sort"
	"sync"
)

// EndpointIndex holds the endpoints of every service, by hostname and by
// shard (the source that reported them). It is the one mutable part of the
// model: endpoint changes update it in place and trigger an EDS-only push
// instead of a new PushContext. Slices it returns are immutable snapshots.
type EndpointIndex struct {
	mu sync.RWMutex
	// shards[hostname][shard] → endpoints reported by that shard.
	shards map[string]map[string][]*Endpoint
	// merged[hostname] caches the sorted union across shards.
	merged map[string][]*Endpoint
	// hostsAt[address] are the hostnames with a merged endpoint at
	// address, so ByAddress need not scan every host.
	hostsAt map[string]map[string]struct{}
	// version increments with every change.
	version uint64
}

// NewEndpointIndex returns an empty index.
func NewEndpointIndex() *EndpointIndex {
	return &EndpointIndex{shards: map[string]map[string][]*Endpoint{}, merged: map[string][]*Endpoint{}, hostsAt: map[string]map[string]struct{}{}}
}

// Update replaces the endpoints shard reports for hostname and says whether
// anything changed. Nil or empty eps removes the shard's endpoints.
func (x *EndpointIndex) Update(shard, hostname string, eps []*Endpoint) bool {
	sorted := slices.Clone(eps)
	sortEndpoints(sorted)
	x.mu.Lock()
	defer x.mu.Unlock()
	byShard := x.shards[hostname]
	if endpointsEqual(byShard[shard], sorted) {
		return false
	}
	if len(sorted) == 0 {
		delete(byShard, shard)
		if len(byShard) == 0 {
			delete(x.shards, hostname)
		}
	} else {
		if byShard == nil {
			byShard = map[string][]*Endpoint{}
			x.shards[hostname] = byShard
		}
		byShard[shard] = sorted
	}
	x.remerge(hostname)
	x.version++
	return true
}

// DeleteShard removes every endpoint shard reported and returns the hostnames it touched.
func (x *EndpointIndex) DeleteShard(shard string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var touched []string
	for host, byShard := range x.shards {
		if _, ok := byShard[shard]; !ok {
			continue
		}
		delete(byShard, shard)
		if len(byShard) == 0 {
			delete(x.shards, host)
		}
		x.remerge(host)
		touched = append(touched, host)
	}
	if len(touched) > 0 {
		x.version++
	}
	sort.Strings(touched)
	return touched
}

func (x *EndpointIndex) remerge(hostname string) {
	old := x.merged[hostname]
	x.merge(hostname)
	x.reindexAddresses(hostname, old, x.merged[hostname])
}

func (x *EndpointIndex) merge(hostname string) {
	byShard := x.shards[hostname]
	if len(byShard) == 0 {
		delete(x.merged, hostname)
		return
	}
	if len(byShard) == 1 {
		for _, eps := range byShard {
			x.merged[hostname] = eps
		}
		return
	}
	var all []*Endpoint
	for _, eps := range byShard {
		all = append(all, eps...)
	}
	sortEndpoints(all)
	x.merged[hostname] = all
}

// reindexAddresses moves hostname in hostsAt from the addresses of old to
// those of eps.
func (x *EndpointIndex) reindexAddresses(hostname string, old, eps []*Endpoint) {
	kept := make(map[string]struct{}, len(eps))
	for _, e := range eps {
		kept[e.Address] = struct{}{}
	}
	for _, e := range old {
		if _, ok := kept[e.Address]; ok {
			continue
		}
		if hosts := x.hostsAt[e.Address]; hosts != nil {
			delete(hosts, hostname)
			if len(hosts) == 0 {
				delete(x.hostsAt, e.Address)
			}
		}
	}
	for _, e := range eps {
		hosts := x.hostsAt[e.Address]
		if hosts == nil {
			hosts = map[string]struct{}{}
			x.hostsAt[e.Address] = hosts
		}
		hosts[hostname] = struct{}{}
	}
}

// Endpoints returns the endpoints of hostname, sorted by address and port.
func (x *EndpointIndex) Endpoints(hostname string) []*Endpoint {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.merged[hostname]
}

// ByAddress returns, for every hostname with an endpoint at ip, those endpoints.
func (x *EndpointIndex) ByAddress(ip string) map[string][]*Endpoint {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := map[string][]*Endpoint{}
	for host := range x.hostsAt[ip] {
		for _, e := range x.merged[host] {
			if e.Address == ip {
				out[host] = append(out[host], e)
			}
		}
	}
	return out
}

// Version increments with every change; tests and caches use it.
func (x *EndpointIndex) Version() uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.version
}

func sortEndpoints(eps []*Endpoint) {
	sort.SliceStable(eps, func(i, j int) bool {
		a, b := eps[i], eps[j]
		if a.Address != b.Address {
			return a.Address < b.Address
		}
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		return a.ServicePortName < b.ServicePortName
	})
}

func endpointsEqual(a, b []*Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !endpointEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

func endpointEqual(a, b *Endpoint) bool {
	if a.Address != b.Address || a.Port != b.Port || a.ServicePortName != b.ServicePortName ||
		a.ServiceAccount != b.ServiceAccount || a.Locality != b.Locality || a.Weight != b.Weight ||
		a.Healthy != b.Healthy || a.Namespace != b.Namespace || a.WorkloadName != b.WorkloadName || a.Workload != b.Workload || a.ClusterID != b.ClusterID || a.EndpointSlice != b.EndpointSlice || a.HostName != b.HostName ||
		len(a.Labels) != len(b.Labels) {
		return false
	}
	if a.Network != b.Network {
		return false
	}
	for k, v := range a.Labels {
		if b.Labels[k] != v {
			return false
		}
	}
	return true
}
