package listener

import (
	"fmt"
	"log/slog"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// Generator serves LDS. Logger may be nil (no logs).
type Generator struct {
	Logger *slog.Logger
}

var _ model.Generator = Generator{}

// Generate returns every listener of proxy (LDS is a wildcard subscription).
func (g Generator) Generate(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	listeners, err := Build(proxy, push, log.With("proxy", proxy.ID))
	if err != nil {
		return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
	}
	out := make(model.Resources, 0, len(listeners))
	for _, l := range listeners {
		r, err := cluster.Resource(l.Name, l)
		if err != nil {
			return nil, fmt.Errorf("lds for %s: listener %s: %w", proxy.ID, l.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}
