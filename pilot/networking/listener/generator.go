package listener

import (
	"fmt"
	"log/slog"
	"strconv"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/resource"
	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
)

// Generator serves LDS. Logger may be nil (no logs).
//
// Every listener carries the proxy's telemetry (pilot/networking/telemetry):
// the cached ones are keyed by telemetry.Key too, and depend on
// Telemetry objects.
//
// Outbound listeners are functions of their name (which carries a
// Sidecar egress bind address), port, (TCP) service hostname, translated
// tcp routes, translated tls chains with the outboundTrafficPolicy their
// default chain follows, and whether a Sidecar binds them (captureMode
// NONE) alone, so
// they are cached under those with no dependency (only
// a mesh-wide invalidation or the cache bound drops them); virtualOutbound
// depends on the mesh only. virtualInbound (and the real inbound listeners
// of Sidecar ingress ports with captureMode NONE) is per proxy and built
// fresh.
type Generator struct {
	Logger *slog.Logger
}

var _ model.Generator = Generator{}

var virtualOutboundKey = model.XDSCacheKey{Type: model.ListenerType, Name: VirtualOutbound}

// Generate returns every listener of proxy (LDS is a wildcard
// subscription): virtualOutbound, virtualInbound, then the outbound ones.
func (g Generator) Generate(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("proxy", proxy.ID)
	cache := push.XDSCache()
	tel, err := telemetry.For(proxy, push)
	if err != nil {
		return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
	}
	for _, w := range tel.Warnings {
		log.Warn("telemetry setting not applied", "warning", w)
	}
	// Telemetry (metadata exchange, stats, access logs, tracing) is part of
	// every listener: its key is part of every cache key, and a Telemetry
	// change drops the cached listeners.
	telKey := "\x00telemetry" + tel.CacheKey()
	deps := []model.ConfigKey{model.DependsOnAll(model.KindTelemetry)}
	specs := outboundListeners(proxy, push, log)
	out := make(model.Resources, 0, len(specs)+2)

	// The Sidecar's outboundTrafficPolicy, else the mesh's, picks the catch-all.
	allowAny := push.SidecarScope(proxy).AllowAny()
	voKey := virtualOutboundKey
	voKey.Scope = strconv.FormatBool(allowAny) + telKey
	vo, ok := cache.Get(voKey)
	if !ok {
		tok := cache.Token(push)
		l, err := virtualOutbound(allowAny)
		if err == nil {
			err = tel.Apply(l, telemetry.SidecarOutbound)
		}
		if err != nil {
			return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
		}
		r, err := resource.Marshal(l.Name, l)
		if err != nil {
			return nil, fmt.Errorf("lds for %s: listener %s: %w", proxy.ID, l.Name, err)
		}
		vo = []*discovery.Resource{r}
		cache.Add(voKey, deps, tok, vo)
	}
	out = append(out, vo...)

	vi, bound, err := inboundListeners(proxy, push, log)
	if err != nil {
		return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
	}
	for _, l := range append([]*listenerv3.Listener{vi}, bound...) {
		if err := tel.Apply(l, telemetry.SidecarInbound); err != nil {
			return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
		}
		r, err := resource.Marshal(l.Name, l)
		if err != nil {
			return nil, fmt.Errorf("lds for %s: listener %s: %w", proxy.ID, l.Name, err)
		}
		out = append(out, r)
	}

	for _, o := range specs {
		key := model.XDSCacheKey{Type: model.ListenerType, Name: o.name, Scope: o.cacheScope() + telKey}
		if res, ok := cache.Get(key); ok {
			out = append(out, res[0])
			continue
		}
		tok := cache.Token(push)
		l, err := o.build()
		if err == nil {
			err = tel.Apply(l, telemetry.SidecarOutbound)
		}
		if err != nil {
			return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
		}
		r, err := resource.Marshal(l.Name, l)
		if err != nil {
			return nil, fmt.Errorf("lds for %s: listener %s: %w", proxy.ID, l.Name, err)
		}
		cache.Add(key, deps, tok, []*discovery.Resource{r})
		out = append(out, r)
	}
	return out, nil
}
