package xds

import (
	"sort"

	"github.com/meshpilot/meshpilot/model"
)

// ProxyView is one connected proxy as tools outside the transport see it
// (explain, preview, the console): its parsed node and a copy of what it
// subscribes to. It shares nothing mutable with the stream.
type ProxyView struct {
	ConnectionID string
	Proxy        *model.Proxy
	// Watched are the proxy's subscriptions, in push order (CDS, EDS, LDS, RDS, then by type URL).
	Watched []model.WatchedResource
}

// Watch returns the subscription of typeURL and whether the proxy has one.
func (v ProxyView) Watch(typeURL string) (model.WatchedResource, bool) {
	for _, w := range v.Watched {
		if w.TypeURL == typeURL {
			return w, true
		}
	}
	return model.WatchedResource{}, false
}

// ConnectedProxies returns every connected proxy, sorted by connection ID.
func (s *DiscoveryServer) ConnectedProxies() []ProxyView {
	conns := s.connections()
	out := make([]ProxyView, 0, len(conns))
	for _, c := range conns {
		out = append(out, c.view())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ConnectionID < out[j].ConnectionID })
	return out
}

// ConnectedProxy finds a connected proxy by connection ID or node ID.
func (s *DiscoveryServer) ConnectedProxy(id string) (ProxyView, bool) {
	c := s.connection(id)
	if c == nil {
		return ProxyView{}, false
	}
	return c.view(), true
}

// Generate runs the generator that serves typeURL to v's proxy against push
// and w, as a push would but sending nothing: the resources a proxy would
// get from that snapshot. It returns nil, nil when the proxy's kind of
// client is not served typeURL. Generators read and fill push's cache, if
// it has one (see model.XDSCache): a snapshot built for a dry run should
// have none.
func (s *DiscoveryServer) Generate(v ProxyView, push *model.PushContext, typeURL string, w *model.WatchedResource) (model.Resources, error) {
	gen := s.gens.Generator(v.Proxy, typeURL)
	if gen == nil {
		return nil, nil
	}
	return gen.Generate(v.Proxy, push, w, proxyRequest(push))
}

func (c *Connection) view() ProxyView {
	v := ProxyView{ConnectionID: c.id, Proxy: c.proxy}
	for _, t := range c.watchedTypes() {
		v.Watched = append(v.Watched, c.watchedCopy(t))
	}
	return v
}
