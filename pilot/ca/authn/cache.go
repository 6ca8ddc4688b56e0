package authn

import (
	"container/list"
	"crypto/sha256"
	"slices"
	"sync"
	"time"
)

// tokenKey is the SHA-256 of a token: the cache never holds tokens.
type tokenKey [sha256.Size]byte

func hashToken(token string) tokenKey { return sha256.Sum256([]byte(token)) }

// tokenCache remembers accepted tokens until an expiry, at most size of them;
// when full, the oldest insertion is dropped.
type tokenCache struct {
	size int

	mu      sync.Mutex
	entries map[tokenKey]*list.Element // of *cacheEntry
	order   list.List                  // oldest first
}

type cacheEntry struct {
	key         tokenKey
	trustDomain string
	caller      Caller
	expires     time.Time
}

func newTokenCache(size int) *tokenCache {
	return &tokenCache{size: size, entries: make(map[tokenKey]*list.Element)}
}

// get returns a copy of the Caller cached for key if it has not expired at
// now and was made for trustDomain (a changed trust domain is a miss).
func (c *tokenCache) get(key tokenKey, trustDomain string, now time.Time) (*Caller, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.expires) || e.trustDomain != trustDomain {
		c.order.Remove(el)
		delete(c.entries, key)
		return nil, false
	}
	caller := e.caller
	caller.Identities = slices.Clone(caller.Identities)
	return &caller, true
}

// put caches a copy of caller for key until expires.
func (c *tokenCache) put(key tokenKey, trustDomain string, caller *Caller, expires time.Time) {
	e := &cacheEntry{key: key, trustDomain: trustDomain, caller: *caller, expires: expires}
	e.caller.Identities = slices.Clone(caller.Identities)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.order.Remove(el)
	}
	c.entries[key] = c.order.PushBack(e)
	for len(c.entries) > c.size {
		oldest := c.order.Front()
		c.order.Remove(oldest)
		delete(c.entries, oldest.Value.(*cacheEntry).key)
	}
}

// len returns the number of entries, expired ones included.
func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
