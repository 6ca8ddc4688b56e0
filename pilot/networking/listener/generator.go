package listener

import (
	"fmt"
	"log/slog"
	"strconv"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
	"github.com/meshpilot/meshpilot/pilot/networking/resource"
	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
	"github.com/meshpilot/meshpilot/pilot/networking/wasm"
)

// extensions are what every listener of a proxy gets after it is built,
// in istiod's order: telemetry, then the WasmPlugin filters.
type extensions struct {
	tel  *telemetry.Config
	wasm wasm.Plugins
}

func (e extensions) apply(l *listenerv3.Listener, class telemetry.Class) error {
	if err := e.tel.Apply(l, class); err != nil {
		return err
	}
	return e.wasm.Apply(l, class)
}

// Generator serves LDS. Logger may be nil (no logs).
//
// Every listener carries the proxy's telemetry (pilot/networking/telemetry)
// and WasmPlugin filters (pilot/networking/wasm): the cached ones are keyed
// by both too, and depend on Telemetry and WasmPlugin objects.
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
//
// EnvoyFilter patches are applied to every listener after it is built and
// before it is marshalled; cached listeners are keyed by the patches that
// apply to them too (envoyfilter.Patches.Key), so proxies with the same
// EnvoyFilters share them.
type Generator struct {
	Logger *slog.Logger
	// EnvoyFilters receives what happens to EnvoyFilter patches.
	EnvoyFilters envoyfilter.Reporter
}

var _ model.Generator = Generator{}

var virtualOutboundKey = model.XDSCacheKey{Type: model.ListenerType, Name: VirtualOutbound}

// Generate returns every listener of proxy (LDS is a wildcard
// subscription): virtualOutbound, virtualInbound, then the outbound ones,
// then those EnvoyFilters add.
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
	// Telemetry (metadata exchange, stats, access logs, tracing) and the
	// WasmPlugin filters are part of every listener: their keys are part of
	// every cache key, and a Telemetry or WasmPlugin change drops the
	// cached listeners.
	ext := extensions{tel: tel, wasm: wasm.For(proxy, push)}
	wasmKey := "\x00wasm" + ext.wasm.Key()
	telKey := "\x00telemetry" + tel.CacheKey() + wasmKey
	// Listeners without HTTP connection managers carry no span tags.
	tcpTelKey := "\x00telemetry-tcp" + tel.TCPCacheKey() + wasmKey
	deps := []model.ConfigKey{model.DependsOnAll(model.KindTelemetry), model.DependsOnAll(model.KindWasmPlugin)}
	specs := outboundListeners(proxy, push, log)
	out := make(model.Resources, 0, len(specs)+2)
	patches := envoyfilter.For(proxy, push, g.EnvoyFilters)
	outKey := patches.KeyFor(envoyfilter.SidecarOutbound, envoyfilter.ListenerKinds()...)

	// The Sidecar's outboundTrafficPolicy, else the mesh's, picks the catch-all.
	allowAny := push.SidecarScope(proxy).AllowAny()
	voKey := virtualOutboundKey
	voKey.Scope = strconv.FormatBool(allowAny) + tcpTelKey
	voKey.EnvoyFilters = outKey
	vo, ok := cache.Get(voKey)
	if !ok {
		tok := cache.Token(push)
		l, err := virtualOutbound(allowAny)
		if err == nil {
			err = ext.apply(l, telemetry.SidecarOutbound)
		}
		if err != nil {
			return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
		}
		if vo, err = marshalPatched(patches, envoyfilter.SidecarOutbound, l); err != nil {
			return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
		}
		cache.Add(voKey, deps, tok, vo)
	}
	out = append(out, vo...)

	vi, bound, err := inboundListeners(proxy, push, log)
	if err != nil {
		return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
	}
	for _, l := range append([]*listenerv3.Listener{vi}, bound...) {
		if err := ext.apply(l, telemetry.SidecarInbound); err != nil {
			return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
		}
		res, err := marshalPatched(patches, envoyfilter.SidecarInbound, l)
		if err != nil {
			return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
		}
		out = append(out, res...)
	}

	for _, o := range specs {
		scope := o.cacheScope() + telKey
		if !o.hasHTTP() {
			scope = o.cacheScope() + tcpTelKey
		}
		key := model.XDSCacheKey{Type: model.ListenerType, Name: o.name, Scope: scope, EnvoyFilters: outKey}
		if res, ok := cache.Get(key); ok {
			out = append(out, res...)
			continue
		}
		tok := cache.Token(push)
		l, err := o.build()
		if err == nil {
			err = ext.apply(l, telemetry.SidecarOutbound)
		}
		if err != nil {
			return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
		}
		res, err := marshalPatched(patches, envoyfilter.SidecarOutbound, l)
		if err != nil {
			return nil, fmt.Errorf("lds for %s: %w", proxy.ID, err)
		}
		cache.Add(key, deps, tok, res)
		out = append(out, res...)
	}
	return appendAdded(out, patches)
}

// marshalPatched applies the patches of ctx to l and marshals the result:
// none when a patch removes it.
func marshalPatched(patches *envoyfilter.Patches, ctx envoyfilter.Context, l *listenerv3.Listener) ([]*discovery.Resource, error) {
	l, ok := patches.Listener(ctx, l)
	if !ok {
		return []*discovery.Resource{}, nil
	}
	r, err := resource.Marshal(l.Name, l)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", l.Name, err)
	}
	return []*discovery.Resource{r}, nil
}

// appendAdded appends the listeners LISTENER ADD patches create (outbound
// and inbound context), skipping names already served.
func appendAdded(out model.Resources, patches *envoyfilter.Patches) (model.Resources, error) {
	if !patches.Has(envoyfilter.SidecarOutbound, networking.EnvoyFilter_LISTENER) &&
		!patches.Has(envoyfilter.SidecarInbound, networking.EnvoyFilter_LISTENER) {
		return out, nil
	}
	seen := make(map[string]bool, len(out))
	for _, r := range out {
		seen[r.GetName()] = true
	}
	for _, ctx := range []envoyfilter.Context{envoyfilter.SidecarOutbound, envoyfilter.SidecarInbound} {
		for _, l := range patches.AddedListeners(ctx) {
			if seen[l.GetName()] {
				continue
			}
			seen[l.GetName()] = true
			r, err := resource.Marshal(l.Name, l)
			if err != nil {
				return nil, fmt.Errorf("listener %s: %w", l.Name, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}
