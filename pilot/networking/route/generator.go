package route

import (
	"fmt"
	"log/slog"
	"sort"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// Generator serves RDS. Logger may be nil (no logs).
type Generator struct {
	Logger *slog.Logger
}

var _ model.Generator = Generator{}

// Generate returns the route configuration of every name in w, sorted by name.
func (g Generator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if w == nil {
		return nil, nil
	}
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("proxy", proxy.ID)
	names := w.Names()
	sort.Strings(names)
	out := make(model.Resources, 0, len(names))
	for _, n := range names {
		rc := BuildRouteConfiguration(proxy, push, n, log)
		r, err := cluster.Resource(n, rc)
		if err != nil {
			return nil, fmt.Errorf("rds for %s: route %s: %w", proxy.ID, n, err)
		}
		out = append(out, r)
	}
	return out, nil
}
