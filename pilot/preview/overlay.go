package preview

import (
	"sort"

	"github.com/meshpilot/meshpilot/model"
)

// overlay is a ConfigStore that reads as base with a change applied:
// objects put replace or add to base's, objects deleted are left out.
// base is never written to.
type overlay struct {
	base    model.ConfigStore
	put     map[model.ConfigKey]model.Config
	deleted map[model.ConfigKey]bool
}

// List returns base's objects of kind with the change applied, sorted by
// namespace then name as the store interface requires.
func (o *overlay) List(kind model.Kind) []model.Config {
	base := o.base.List(kind)
	touched := false
	for k := range o.put {
		touched = touched || k.Kind == kind
	}
	for k := range o.deleted {
		touched = touched || k.Kind == kind
	}
	if !touched {
		return base
	}
	out := make([]model.Config, 0, len(base)+len(o.put))
	for _, c := range base {
		k := c.Key()
		if _, replaced := o.put[k]; replaced || o.deleted[k] {
			continue
		}
		out = append(out, c)
	}
	for k, c := range o.put {
		if k.Kind == kind {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// find returns base's object of key k.
func find(store model.ConfigStore, k model.ConfigKey) (model.Config, bool) {
	for _, c := range store.List(k.Kind) {
		if c.Namespace == k.Namespace && c.Name == k.Name {
			return c, true
		}
	}
	return model.Config{}, false
}
