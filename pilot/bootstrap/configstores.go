package bootstrap

import (
	"cmp"
	"slices"

	"github.com/meshpilot/meshpilot/model"
)

// unionStore is one model.ConfigStore over several: the Kubernetes store
// and the file store when both sources run. On an object (kind, namespace,
// name) several stores hold, the earlier store wins.
type unionStore []model.ConfigStore

var _ model.ConfigStore = unionStore(nil)

// List returns the objects of kind from every store, sorted by namespace
// then name. The objects are shared; so is the slice when only one store
// has objects of kind (a store's List is sorted and read-only), else it is
// new.
func (u unionStore) List(kind model.Kind) []model.Config {
	lists := make([][]model.Config, 0, len(u))
	for _, s := range u {
		if l := s.List(kind); len(l) > 0 {
			lists = append(lists, l)
		}
	}
	switch len(lists) {
	case 0:
		return nil
	case 1:
		return lists[0]
	}
	var out []model.Config
	seen := map[[2]string]bool{}
	for _, l := range lists {
		for _, c := range l {
			k := [2]string{c.Namespace, c.Name}
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b model.Config) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}
