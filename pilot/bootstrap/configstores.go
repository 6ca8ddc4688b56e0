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
// then name. The slice is new; the objects are shared.
func (u unionStore) List(kind model.Kind) []model.Config {
	var out []model.Config
	seen := map[[2]string]bool{}
	for _, s := range u {
		for _, c := range s.List(kind) {
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
