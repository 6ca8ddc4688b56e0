package secret

import (
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/resource"
)

// maxCachedCAs bounds the CA bundles a CACache holds; past it the cache
// starts over.
const maxCachedCAs = 1024

// CACache holds the marshalled SDS resource of each configmap:// CA bundle
// served, keyed by name and valid while the snapshot's ca.crt is the same
// slice (the Source replaces the slice on every change), so that a bundle
// asked for by every proxy is marshalled, and held, once. Safe for
// concurrent use.
type CACache struct {
	mu sync.Mutex
	m  map[string]cachedCA
}

type cachedCA struct {
	ca  []byte
	res *discovery.Resource
}

// NewCACache returns an empty cache.
func NewCACache() *CACache { return &CACache{m: map[string]cachedCA{}} }

// resource returns the SDS resource of configmap:// name for proxy, from
// the cache when its ca.crt has not changed. The resource is shared:
// callers must not modify it.
func (c *CACache) resource(push *model.PushContext, proxy *model.Proxy, name string) (*discovery.Resource, error) {
	s, err := build(push, proxy, name, nil)
	if err != nil {
		c.mu.Lock()
		delete(c.m, name)
		c.mu.Unlock()
		return nil, err
	}
	ca := s.GetValidationContext().GetTrustedCa().GetInlineBytes()
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if ok && len(e.ca) == len(ca) && len(ca) > 0 && &e.ca[0] == &ca[0] {
		return e.res, nil
	}
	r, err := resource.Marshal(name, s)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) >= maxCachedCAs {
		clear(c.m)
	}
	c.m[name] = cachedCA{ca: ca, res: r}
	c.mu.Unlock()
	return r, nil
}
