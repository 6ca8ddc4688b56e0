package model

import (
	"maps"
	"slices"
	"sort"
	"strings"
)

// derive returns the scopes of pc made from those cached in c (the scopes
// of pc's predecessor, which had the same Sidecars and, but for the changed
// hostnames, the same services), with the services of the changed
// hostnames taken from pc: O(changed × log(scope)) plus a copy
// per scope, instead of a pass over every service per scope.
func (c *sidecarScopes) derive(pc *PushContext, changed map[string]struct{}) *sidecarScopes {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := &sidecarScopes{scopes: make(map[scopeKey]*SidecarScope, len(c.scopes))}
	for k, s := range c.scopes {
		out.scopes[k] = s.patched(pc, changed)
	}
	return out
}

// patched returns a copy of s for pc whose services are those of pc for
// the changed hostnames and s's for the others.
func (s *SidecarScope) patched(pc *PushContext, changed map[string]struct{}) *SidecarScope {
	n := *s
	n.push = pc
	if len(changed) == 0 {
		return &n
	}
	n.byHost = maps.Clone(s.byHost)
	n.services = slices.Clone(s.services)
	for h := range changed {
		svc := pc.servicesByHost[h]
		if svc != nil && !(svc.VisibleTo(n.Namespace) && n.selects(svc.Namespace, h)) {
			svc = nil
		}
		i, found := sort.Find(len(n.services), func(i int) int { return strings.Compare(h, n.services[i].Hostname) })
		switch {
		case svc != nil && found:
			n.services[i] = svc
			n.byHost[h] = svc
		case svc != nil:
			n.services = slices.Insert(n.services, i, svc)
			n.byHost[h] = svc
		case found:
			n.services = slices.Delete(n.services, i, i+1)
			delete(n.byHost, h)
		}
	}
	n.services = slices.Clip(n.services)
	return &n
}
