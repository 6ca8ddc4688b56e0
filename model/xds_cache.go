package model

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// DefaultXDSCacheEntries bounds an XDSCache whose options give no size.
const DefaultXDSCacheEntries = 100_000

// XDSCacheKey names one cache entry: the marshalled resources of one type
// whose content is a function of (Name, Scope) and of the PushContext
// objects listed as the entry's dependencies.
type XDSCacheKey struct {
	// Type is the xDS type URL.
	Type string
	// Name is the resource name, or the name of a group of resources made
	// together (a service's clusters).
	Name string
	// Config is the configuration object the content depends on that may
	// differ between proxies (the DestinationRule a proxy sees for a
	// service, by precedence from its namespace); zero when none.
	Config ConfigKey
	// Scope holds any other per-proxy input (the proxy's namespace for
	// route configurations).
	Scope string
	// EnvoyFilters identifies the EnvoyFilter patches applied to the
	// content (their names and versions); "" when none applies. Proxies
	// with the same patches share the entry.
	EnvoyFilters string
}

// XDSCacheOptions configure an XDSCache. Every field is optional.
type XDSCacheOptions struct {
	// MaxEntries bounds the entries; adding to a full cache evicts one.
	// Zero means DefaultXDSCacheEntries.
	MaxEntries int
	// OnRead is called for every lookup (pilot_xds_cache_reads).
	OnRead func(hit bool)
	// OnSize is called with the entry count after it changed (pilot_xds_cache_size).
	OnSize func(entries int)
}

// XDSCache holds marshalled resources shared by every proxy whose resource
// has the same key, so a push to many proxies marshals each resource once.
//
// Entries are dropped by Invalidate, which a push calls with its request
// before it builds the PushContext the push uses: an entry is dropped when
// any of its dependencies is in req.ConfigsUpdated; everything is dropped
// for a full push without keys or a MeshConfig change.
//
// A resource generated from data older than the last invalidation is never
// stored: Add takes the CacheToken read before generating and refuses it
// when an invalidation happened since, or when the PushContext it was made
// from predates the last full invalidation. All methods are safe for
// concurrent use; a nil *XDSCache caches nothing.
type XDSCache struct {
	opts XDSCacheOptions

	mu      sync.RWMutex
	entries map[XDSCacheKey]*cacheEntry
	// byDep indexes entries by normalised dependency (see depKey).
	byDep map[ConfigKey]map[XDSCacheKey]struct{}
	// epoch counts invalidations; fullEpoch counts those of full pushes.
	epoch     uint64
	fullEpoch uint64
}

type cacheEntry struct {
	res  []*discovery.Resource
	deps []ConfigKey
}

// CacheToken is what a generator reads before a miss and hands to Add.
type CacheToken struct {
	epoch     uint64
	pushEpoch uint64
}

// NewXDSCache returns an empty cache.
func NewXDSCache(opts XDSCacheOptions) *XDSCache {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultXDSCacheEntries
	}
	return &XDSCache{opts: opts, entries: map[XDSCacheKey]*cacheEntry{}, byDep: map[ConfigKey]map[XDSCacheKey]struct{}{}}
}

// DependsOnAll returns the dependency "any object of kind": an entry with it
// is dropped whenever any key of kind changes.
func DependsOnAll(kind Kind) ConfigKey { return ConfigKey{Kind: kind} }

// ServiceDep is the dependency on a service's definition, by hostname.
func ServiceDep(hostname string) ConfigKey { return ConfigKey{Kind: KindService, Name: hostname} }

// EndpointsDep is the dependency on a service's endpoints, by hostname.
func EndpointsDep(hostname string) ConfigKey { return ConfigKey{Kind: KindEndpoints, Name: hostname} }

// depKey normalises a key: services and endpoints are named by hostname
// alone, whatever namespace the source reported.
func depKey(k ConfigKey) ConfigKey {
	if k.Kind == KindService || k.Kind == KindEndpoints {
		k.Namespace = ""
	}
	return k
}

// Get returns the resources stored under k. The slice and resources are
// shared: callers must not change them.
func (c *XDSCache) Get(k XDSCacheKey) ([]*discovery.Resource, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.RLock()
	e, ok := c.entries[k]
	c.mu.RUnlock()
	if c.opts.OnRead != nil {
		c.opts.OnRead(ok)
	}
	if !ok {
		return nil, false
	}
	return e.res, true
}

// Token returns the token to pass to Add for resources about to be
// generated from push. Read it before reading anything the resource is made of.
func (c *XDSCache) Token(push *PushContext) CacheToken {
	if c == nil {
		return CacheToken{}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	t := CacheToken{epoch: c.epoch}
	if push != nil {
		t.pushEpoch = push.cacheEpoch
	}
	return t
}

// Add stores res under k with its dependencies, unless an invalidation
// happened since tok was read or tok's PushContext predates the last full
// invalidation. res must not be changed afterwards.
func (c *XDSCache) Add(k XDSCacheKey, deps []ConfigKey, tok CacheToken, res []*discovery.Resource) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if tok.epoch != c.epoch || tok.pushEpoch != c.fullEpoch {
		return
	}
	if old, ok := c.entries[k]; ok {
		c.unindex(k, old)
	} else if len(c.entries) >= c.opts.MaxEntries {
		c.evictOne()
	}
	e := &cacheEntry{res: res, deps: make([]ConfigKey, len(deps))}
	for i, d := range deps {
		d = depKey(d)
		e.deps[i] = d
		set := c.byDep[d]
		if set == nil {
			set = map[XDSCacheKey]struct{}{}
			c.byDep[d] = set
		}
		set[k] = struct{}{}
	}
	c.entries[k] = e
	c.sizeChanged()
}

// evictOne drops an arbitrary entry (map iteration order); mu must be held.
func (c *XDSCache) evictOne() {
	for k, e := range c.entries {
		c.unindex(k, e)
		delete(c.entries, k)
		return
	}
}

func (c *XDSCache) unindex(k XDSCacheKey, e *cacheEntry) {
	for _, d := range e.deps {
		if set := c.byDep[d]; set != nil {
			delete(set, k)
			if len(set) == 0 {
				delete(c.byDep, d)
			}
		}
	}
}

func (c *XDSCache) sizeChanged() {
	if c.opts.OnSize != nil {
		c.opts.OnSize(len(c.entries))
	}
}

// Invalidate drops what req changes and starts a new epoch. Call it before
// building the PushContext of a full push, and before an EDS-only push.
func (c *XDSCache) Invalidate(req *PushRequest) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	if req == nil || req.Full {
		c.fullEpoch++
	}
	if req == nil || (req.Full && len(req.ConfigsUpdated) == 0) || req.Updated(KindMeshConfig) {
		clear(c.entries)
		clear(c.byDep)
		c.sizeChanged()
		return
	}
	for k := range req.ConfigsUpdated {
		c.dropDependents(depKey(k))
		c.dropDependents(DependsOnAll(k.Kind))
	}
	c.sizeChanged()
}

func (c *XDSCache) dropDependents(d ConfigKey) {
	for k := range c.byDep[d] {
		if e, ok := c.entries[k]; ok {
			c.unindex(k, e)
			delete(c.entries, k)
		}
	}
	delete(c.byDep, d)
}

// Clear drops every entry without starting a new epoch: memory relief, or
// a cold cache in benchmarks. Dropping entries never makes a reader stale.
func (c *XDSCache) Clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
	clear(c.byDep)
	c.sizeChanged()
}

// Len returns the number of entries.
func (c *XDSCache) Len() int {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}

// FullEpoch is the number of full invalidations so far; NewPushContext
// stamps it on the snapshot it builds.
func (c *XDSCache) FullEpoch() uint64 {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.fullEpoch
}

// ResourceVersion is the version of a marshalled resource: the first 8
// bytes of its sha256, in hex. It depends only on the content, so it is the
// same across proxies and restarts.
func ResourceVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
