package model

import (
	"sort"
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
