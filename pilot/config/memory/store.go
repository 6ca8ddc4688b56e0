// Package memory holds configuration objects in memory: the store every
// config source (files, Kubernetes) feeds and the PushContext reads.
package memory

import (
	"cmp"
	"maps"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/model"
)

// objectKey identifies an object within one kind.
type objectKey struct {
	namespace, name string
}

// Store is a thread-safe model.ConfigStore. Writers replace the whole
// content; readers get immutable, sorted slices that are rebuilt only for
// the kinds a write changed.
type Store struct {
	mu      sync.RWMutex
	objects map[model.Kind]map[objectKey]model.Config
	// lists caches List results per kind; a kind's slice is replaced, never
	// modified, when the kind changes.
	lists map[model.Kind][]model.Config
}

var _ model.ConfigStore = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{
		objects: map[model.Kind]map[objectKey]model.Config{},
		lists:   map[model.Kind][]model.Config{},
	}
}

// List returns every object of kind, sorted by namespace then name. The
// slice is shared between callers and must not be modified.
func (s *Store) List(kind model.Kind) []model.Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lists[kind]
}

// Get returns the object of kind with the given namespace and name.
func (s *Store) Get(kind model.Kind, namespace, name string) (model.Config, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.objects[kind][objectKey{namespace, name}]
	return c, ok
}

// Replace makes configs the whole content of the store and returns the keys
// of objects that were added, changed or removed, sorted by kind, namespace
// and name. An object counts as changed when its spec (proto.Equal), labels
// or annotations differ; unchanged objects keep their previous value, so
// their Spec pointers stay stable. When configs holds the same key twice,
// the last one wins.
func (s *Store) Replace(configs []model.Config) []model.ConfigKey {
	next := make(map[model.Kind]map[objectKey]model.Config)
	for _, c := range configs {
		byKey := next[c.Kind]
		if byKey == nil {
			byKey = map[objectKey]model.Config{}
			next[c.Kind] = byKey
		}
		byKey[objectKey{c.Namespace, c.Name}] = c
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []model.ConfigKey
	touched := map[model.Kind]bool{}
	for kind, byKey := range next {
		old := s.objects[kind]
		for k, c := range byKey {
			prev, ok := old[k]
			if ok && sameContent(prev, c) {
				byKey[k] = prev
				continue
			}
			changed = append(changed, model.ConfigKey{Kind: kind, Namespace: k.namespace, Name: k.name})
			touched[kind] = true
		}
	}
	for kind, old := range s.objects {
		for k := range old {
			if _, ok := next[kind][k]; !ok {
				changed = append(changed, model.ConfigKey{Kind: kind, Namespace: k.namespace, Name: k.name})
				touched[kind] = true
			}
		}
	}
	s.objects = next
	for kind := range touched {
		if byKey := next[kind]; len(byKey) > 0 {
			s.lists[kind] = sortedList(byKey)
		} else {
			delete(s.lists, kind)
		}
	}
	slices.SortFunc(changed, model.ConfigKey.Compare)
	return changed
}

func sameContent(a, b model.Config) bool {
	return maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) && proto.Equal(a.Spec, b.Spec)
}

func sortedList(byKey map[objectKey]model.Config) []model.Config {
	out := make([]model.Config, 0, len(byKey))
	for _, c := range byKey {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b model.Config) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	// Clip so a caller's append can never write into the shared array.
	return slices.Clip(out)
}
