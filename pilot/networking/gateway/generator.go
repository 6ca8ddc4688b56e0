package gateway

import (
	"fmt"
	"log/slog"
	"sort"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// ListenerGenerator serves LDS to router proxies (BuildListeners). Logger
// may be nil (no logs). Gateway listeners are built fresh on each push.
type ListenerGenerator struct {
	Logger *slog.Logger
}

// RouteGenerator serves RDS to router proxies (BuildRouteConfiguration).
// Logger may be nil (no logs).
type RouteGenerator struct {
	Logger *slog.Logger
}

// ByNodeType serves sidecars with Sidecar and routers with Router: the
// dispatch for one type URL. (The sidecar generators cannot call this
// package themselves: it builds on theirs.)
type ByNodeType struct {
	Sidecar model.Generator
	Router  model.Generator
}

var (
	_ model.Generator = ListenerGenerator{}
	_ model.Generator = RouteGenerator{}
	_ model.Generator = ByNodeType{}
)

func logger(l *slog.Logger, proxy *model.Proxy) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.With("proxy", proxy.ID)
}

// Generate returns the gateway listeners of proxy (LDS is a wildcard subscription).
func (g ListenerGenerator) Generate(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	ls := BuildListeners(proxy, push, logger(g.Logger, proxy))
	out := make(model.Resources, 0, len(ls))
	for _, l := range ls {
		r, err := cluster.Resource(l.Name, l)
		if err != nil {
			return nil, fmt.Errorf("lds for %s: listener %s: %w", proxy.ID, l.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Generate returns the route configuration of every name in w, sorted by name.
func (g RouteGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if w == nil {
		return nil, nil
	}
	log := logger(g.Logger, proxy)
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

// Generate dispatches on the proxy's node type; a nil generator serves nothing.
func (g ByNodeType) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
	gen := g.Sidecar
	if proxy.Type == model.Router {
		gen = g.Router
	}
	if gen == nil {
		return nil, nil
	}
	return gen.Generate(proxy, push, w, req)
}
