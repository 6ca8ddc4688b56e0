package model

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
)

// ServiceSet holds a registry's services: by hostname and sorted, replaced
// together. Readers get snapshots that later Sets never touch.
type ServiceSet struct {
	mu     sync.RWMutex
	byHost map[string]*Service
	sorted []*Service
}

// Set makes byHost the content; the set keeps the map, which must not be
// changed afterwards.
func (s *ServiceSet) Set(byHost map[string]*Service) {
	sorted := make([]*Service, 0, len(byHost))
	for _, svc := range byHost {
		sorted = append(sorted, svc)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Hostname < sorted[j].Hostname })
	s.mu.Lock()
	s.byHost, s.sorted = byHost, sorted
	s.mu.Unlock()
}

// ByHost returns the services by hostname; the map must not be changed.
func (s *ServiceSet) ByHost() map[string]*Service {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byHost
}

// Services returns the services sorted by hostname; the slice must not be changed.
func (s *ServiceSet) Services() []*Service {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sorted
}

// Service returns the service with the given hostname, or nil.
func (s *ServiceSet) Service(hostname string) *Service {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byHost[hostname]
}

// patchSortLimit is the most changes Patch inserts one by one.
const patchSortLimit = 64

// Patch replaces, adds or (for a nil value) removes the services of the
// given hostnames, leaving the others as they are. Earlier snapshots are
// not changed: the new content is a copy, made in O(services) without a
// sort. Writers must not call Set and Patch concurrently.
func (s *ServiceSet) Patch(changed map[string]*Service) {
	if len(changed) == 0 {
		return
	}
	s.mu.RLock()
	byHost, sorted := maps.Clone(s.byHost), slices.Clone(s.sorted)
	s.mu.RUnlock()
	if byHost == nil {
		byHost = map[string]*Service{}
	}
	if len(changed) > patchSortLimit {
		// Many changes: one sort beats many inserts.
		for h, svc := range changed {
			if svc != nil {
				byHost[h] = svc
			} else {
				delete(byHost, h)
			}
		}
		s.Set(byHost)
		return
	}
	for h, svc := range changed {
		i, found := sort.Find(len(sorted), func(i int) int { return strings.Compare(h, sorted[i].Hostname) })
		switch {
		case svc != nil && found:
			sorted[i] = svc
			byHost[h] = svc
		case svc != nil:
			sorted = slices.Insert(sorted, i, svc)
			byHost[h] = svc
		case found:
			sorted = slices.Delete(sorted, i, i+1)
			delete(byHost, h)
		}
	}
	s.mu.Lock()
	s.byHost, s.sorted = byHost, slices.Clip(sorted)
	s.mu.Unlock()
}
