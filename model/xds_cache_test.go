package model

import (
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

func res(name string) []*discovery.Resource { return []*discovery.Resource{{Name: name}} }

func TestXDSCacheInvalidateByDependency(t *testing.T) {
	var hits, misses, size int
	c := NewXDSCache(XDSCacheOptions{
		OnRead: func(hit bool) {
			if hit {
				hits++
			} else {
				misses++
			}
		},
		OnSize: func(n int) { size = n },
	})
	pc := &PushContext{cacheEpoch: c.FullEpoch()}
	dr := ConfigKey{Kind: KindDestinationRule, Name: "r", Namespace: "ns"}
	a := XDSCacheKey{Type: ClusterType, Name: "a.ns.svc.cluster.local", Config: dr}
	b := XDSCacheKey{Type: ClusterType, Name: "b.ns.svc.cluster.local"}
	r := XDSCacheKey{Type: RouteType, Name: "80", Scope: "ns"}
	c.Add(a, []ConfigKey{ServiceDep(a.Name), dr}, c.Token(pc), res("a"))
	c.Add(b, []ConfigKey{ServiceDep(b.Name), EndpointsDep(b.Name)}, c.Token(pc), res("b"))
	c.Add(r, []ConfigKey{DependsOnAll(KindService)}, c.Token(pc), res("r"))
	if got, ok := c.Get(a); !ok || got[0].Name != "a" || size != 3 {
		t.Fatalf("get a = %v %v, size %d", got, ok, size)
	}

	// Endpoints of b, named with a namespace as sources report them: only b goes.
	c.Invalidate(NewPushRequest(false, ReasonEndpointUpdate, ConfigKey{Kind: KindEndpoints, Name: b.Name, Namespace: "ns"}))
	if _, ok := c.Get(b); ok {
		t.Error("b kept after its endpoints changed")
	}
	if _, ok := c.Get(a); !ok {
		t.Error("a dropped by an endpoint change of b")
	}
	if _, ok := c.Get(r); !ok {
		t.Error("route dropped by an endpoint change")
	}
	// The rule: a goes. A new service: the route (depends on every service) goes.
	c.Invalidate(NewPushRequest(true, ReasonConfigUpdate, dr, ConfigKey{Kind: KindService, Name: "new.ns.svc.cluster.local", Namespace: "ns"}))
	if c.Len() != 0 || size != 0 {
		t.Errorf("%d entries left, size gauge %d, want 0", c.Len(), size)
	}
	if hits != 3 || misses != 1 {
		t.Errorf("reads: %d hits %d misses, want 3 and 1", hits, misses)
	}
}

func TestXDSCacheRefusesStaleAdds(t *testing.T) {
	c := NewXDSCache(XDSCacheOptions{})
	old := &PushContext{cacheEpoch: c.FullEpoch()}
	k := XDSCacheKey{Type: EndpointType, Name: "outbound|80||a"}

	// Read the token, then an endpoint change is invalidated: the add is refused.
	tok := c.Token(old)
	c.Invalidate(NewPushRequest(false, ReasonEndpointUpdate, ConfigKey{Kind: KindEndpoints, Name: "other"}))
	c.Add(k, nil, tok, res("stale"))
	if _, ok := c.Get(k); ok {
		t.Fatal("stored a resource generated before an invalidation")
	}
	// A token read after an EDS-only invalidation, from the same snapshot, is fine.
	c.Add(k, nil, c.Token(old), res("ok"))
	if _, ok := c.Get(k); !ok {
		t.Fatal("refused a resource generated after the invalidation")
	}
	// After a full invalidation, the old snapshot can no longer store.
	c.Invalidate(NewPushRequest(true, ReasonConfigUpdate, ConfigKey{Kind: KindVirtualService, Name: "x", Namespace: "ns"}))
	k2 := XDSCacheKey{Type: EndpointType, Name: "outbound|81||a"}
	c.Add(k2, nil, c.Token(old), res("old snapshot"))
	if _, ok := c.Get(k2); ok {
		t.Fatal("stored a resource generated from a PushContext older than a full invalidation")
	}
	fresh := &PushContext{cacheEpoch: c.FullEpoch()}
	c.Add(k2, nil, c.Token(fresh), res("new snapshot"))
	if _, ok := c.Get(k2); !ok {
		t.Fatal("refused a resource of the current PushContext")
	}
	// A mesh change drops everything.
	c.Invalidate(NewPushRequest(true, ReasonGlobalUpdate, ConfigKey{Kind: KindMeshConfig}))
	if c.Len() != 0 {
		t.Fatalf("%d entries after a mesh change", c.Len())
	}
}

func TestXDSCacheBounded(t *testing.T) {
	c := NewXDSCache(XDSCacheOptions{MaxEntries: 10})
	pc := &PushContext{}
	for i := range 100 {
		name := fmt.Sprintf("h%d", i)
		c.Add(XDSCacheKey{Type: ClusterType, Name: name}, []ConfigKey{ServiceDep(name)}, c.Token(pc), res(name))
	}
	if c.Len() != 10 {
		t.Fatalf("%d entries, want the bound 10", c.Len())
	}
	if len(c.byDep) != 10 {
		t.Fatalf("dependency index holds %d keys, want 10 (evicted entries unindexed)", len(c.byDep))
	}
	c.Clear()
	if c.Len() != 0 || len(c.byDep) != 0 {
		t.Fatal("Clear left entries")
	}
	var nilCache *XDSCache
	nilCache.Add(XDSCacheKey{}, nil, nilCache.Token(pc), nil)
	if _, ok := nilCache.Get(XDSCacheKey{}); ok || nilCache.Len() != 0 {
		t.Fatal("nil cache cached")
	}
}
