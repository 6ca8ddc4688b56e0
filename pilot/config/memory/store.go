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
//
// When configs is sorted by kind, namespace and name without repeats (a
// file snapshot is), each kind is merged with its sorted list: an object
// whose Spec pointer and metadata are those of the stored one costs two
// string comparisons, and only a kind with a change is rebuilt.
func (s *Store) Replace(configs []model.Config) []model.ConfigKey {
	if !sortedUnique(configs) {
		return s.replaceUnsorted(configs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []model.ConfigKey
	kinds := map[model.Kind]bool{}
	for start := 0; start < len(configs); {
		kind := configs[start].Kind
		end := start + 1
		for end < len(configs) && configs[end].Kind == kind {
			end++
		}
		kinds[kind] = true
		changed = s.mergeKind(kind, configs[start:end], changed)
		start = end
	}
	for kind, old := range s.lists {
		if kinds[kind] {
			continue
		}
		for _, c := range old {
			changed = append(changed, model.ConfigKey{Kind: kind, Namespace: c.Namespace, Name: c.Name})
		}
		delete(s.objects, kind)
		delete(s.lists, kind)
	}
	slices.SortFunc(changed, model.ConfigKey.Compare)
	return changed
}

// sortedUnique reports whether configs is strictly sorted by kind,
// namespace and name.
func sortedUnique(configs []model.Config) bool {
	for i := 1; i < len(configs); i++ {
		a, b := &configs[i-1], &configs[i]
		if cmp.Or(cmp.Compare(a.Kind, b.Kind), compareName(a, b)) >= 0 {
			return false
		}
	}
	return true
}

func compareName(a, b *model.Config) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// mergeKind makes in, sorted by namespace and name, the content of kind and
// appends the keys it changed to changed. s.mu must be held.
func (s *Store) mergeKind(kind model.Kind, in []model.Config, changed []model.ConfigKey) []model.ConfigKey {
	old := s.lists[kind]
	from := len(changed)
	i, j := 0, 0
	for i < len(old) || j < len(in) {
		c := 0
		switch {
		case i == len(old):
			c = 1
		case j == len(in):
			c = -1
		default:
			c = compareName(&old[i], &in[j])
		}
		switch {
		case c < 0:
			changed = append(changed, model.ConfigKey{Kind: kind, Namespace: old[i].Namespace, Name: old[i].Name})
			i++
		case c > 0:
			changed = append(changed, model.ConfigKey{Kind: kind, Namespace: in[j].Namespace, Name: in[j].Name})
			j++
		default:
			if !same(old[i], in[j]) {
				changed = append(changed, model.ConfigKey{Kind: kind, Namespace: in[j].Namespace, Name: in[j].Name})
			}
			i++
			j++
		}
	}
	if len(changed) == from {
		return changed
	}
	// Rebuild the kind: a new list (callers hold the old one), the map
	// patched in place for the changed keys only (it is read under s.mu).
	byKey := s.objects[kind]
	if byKey == nil {
		byKey = make(map[objectKey]model.Config, len(in))
		s.objects[kind] = byKey
	}
	for _, k := range changed[from:] {
		delete(byKey, objectKey{k.Namespace, k.Name})
	}
	list := make([]model.Config, 0, len(in))
	i = 0
	for _, c := range in {
		for i < len(old) && compareName(&old[i], &c) < 0 {
			i++
		}
		kept := false
		if i < len(old) && compareName(&old[i], &c) == 0 {
			if kept = same(old[i], c); kept {
				c = old[i]
			}
			i++
		}
		if !kept {
			byKey[objectKey{c.Namespace, c.Name}] = c
		}
		list = append(list, c)
	}
	if len(list) == 0 {
		delete(s.objects, kind)
		delete(s.lists, kind)
		return changed
	}
	s.lists[kind] = slices.Clip(list)
	return changed
}

// same is sameContent with a shortcut for the same Spec.
func same(a, b model.Config) bool {
	if a.Spec != b.Spec {
		return sameContent(a, b)
	}
	return maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations)
}

// replaceUnsorted is Replace for configs in any order, through maps.
func (s *Store) replaceUnsorted(configs []model.Config) []model.ConfigKey {
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
	return maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) && proto.Equal(a.Spec, b.Spec) &&
		proto.Equal(a.Status, b.Status)
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
