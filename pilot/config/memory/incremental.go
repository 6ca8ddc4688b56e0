package memory

import (
	"github.com/meshpilot/meshpilot/model"
)

// Apply adds or replaces one object and reports whether the store changed
// (same rule as Replace: spec, labels or annotations). An unchanged object
// keeps its previous value. Only c's kind's list is rebuilt.
func (s *Store) Apply(c model.Config) bool {
	k := objectKey{c.Namespace, c.Name}
	s.mu.Lock()
	defer s.mu.Unlock()
	byKey := s.objects[c.Kind]
	if prev, ok := byKey[k]; ok && sameContent(prev, c) {
		return false
	}
	// Copy the kind's map: Replace may have handed the old one to nobody,
	// but copying keeps every write a swap, as Replace does.
	next := make(map[objectKey]model.Config, len(byKey)+1)
	for key, v := range byKey {
		next[key] = v
	}
	next[k] = c
	s.objects[c.Kind] = next
	s.lists[c.Kind] = sortedList(next)
	return true
}

// Delete removes one object and reports whether it was there.
func (s *Store) Delete(kind model.Kind, namespace, name string) bool {
	k := objectKey{namespace, name}
	s.mu.Lock()
	defer s.mu.Unlock()
	byKey := s.objects[kind]
	if _, ok := byKey[k]; !ok {
		return false
	}
	next := make(map[objectKey]model.Config, len(byKey))
	for key, v := range byKey {
		if key != k {
			next[key] = v
		}
	}
	if len(next) == 0 {
		delete(s.objects, kind)
		delete(s.lists, kind)
		return true
	}
	s.objects[kind] = next
	s.lists[kind] = sortedList(next)
	return true
}
