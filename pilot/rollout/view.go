package rollout

import (
	"github.com/meshpilot/meshpilot/model"
)

// Stable returns the view of the store every proxy but the canaries is served
// from: an object that asks for a rollout appears in its last admitted
// version (or not at all when it has none) until its current version is
// admitted. Objects that do not ask for one are as in the store, and a
// kind without a held object is the store's own slice, so the view costs a scan of
// each listed kind's annotations and nothing more.
//
// The view does not depend on Observe having seen a change: a canary
// change that reaches the store between Observe and a snapshot build is
// held all the same.
func (g *Gate) Stable() model.ConfigStore {
	return stableView{g: g, store: g.store}
}

type stableView struct {
	g     *Gate
	store model.ConfigStore
}

func (v stableView) List(kind model.Kind) []model.Config {
	list := v.store.List(kind)
	if !Holds(kind) {
		return list
	}
	var out []model.Config // copied on the first held object
	for i := range list {
		c := &list[i]
		if _, asks := c.Annotations[Annotation]; !asks {
			if out != nil {
				out = append(out, *c)
			}
			continue
		}
		admitted, ok := v.g.admitted(c)
		if ok && out == nil {
			continue
		}
		if out == nil {
			out = append(make([]model.Config, 0, len(list)), list[:i]...)
		}
		if admitted != nil {
			out = append(out, *admitted)
		}
	}
	if out == nil {
		return list
	}
	return out
}

// admitted returns the version of c to serve outside the canaries and
// whether it is c itself (nil, false: none).
func (g *Gate) admitted(c *model.Config) (*model.Config, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	known, ok := g.known[c.Key()]
	if ok && sameVersion(known, *c) {
		return c, true
	}
	if r := g.rolls[c.Key()]; r != nil && r.stable != nil {
		s := *r.stable
		return &s, false
	}
	if ok {
		return &known, false
	}
	return nil, false
}
