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
	// version increments with every change.
	version uint64
}

// NewEndpointIndex returns an empty index.
func NewEndpointIndex() *EndpointIndex {
	return &EndpointIndex{shards: map[string]map[string][]*Endpoint{}, merged: map[string][]*Endpoint{}}
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
	for host, eps := range x.merged {
		for _, e := range eps {
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
		a.Healthy != b.Healthy || a.Namespace != b.Namespace || a.WorkloadName != b.WorkloadName || a.EndpointSlice != b.EndpointSlice || a.HostName != b.HostName ||
		len(a.Labels) != len(b.Labels) {
		return false
	}
	for k, v := range a.Labels {
		if b.Labels[k] != v {
			return false
		}
	}
	return true
}
