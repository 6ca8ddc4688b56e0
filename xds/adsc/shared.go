package adsc

import (
	"sync"

	"google.golang.org/protobuf/types/known/anypb"
)

// Shared lets the clients of one process (pilot-load's thousands of
// simulated proxies) keep one copy of each distinct resource and decode
// the references it makes (the EDS name of a cluster, the route configs of
// a listener) once, not once per client: a control plane sends every proxy
// mostly the same bytes. Resources are keyed by type, name and content, so
// sharing never changes what a client holds. Safe for concurrent use.
type Shared struct {
	mu      sync.Mutex
	entries map[sharedKey]*sharedEntry
	// size is the content bytes held; past maxSharedBytes everything is
	// dropped (a long run of changes must not grow the cache forever).
	size int
}

// maxSharedBytes bounds what a Shared holds.
const maxSharedBytes = 256 << 20

type sharedKey struct{ typeURL, name, value string }

type sharedEntry struct {
	res  *anypb.Any
	refs map[string][]string
}

// NewShared returns an empty Shared.
func NewShared() *Shared { return &Shared{entries: map[sharedKey]*sharedEntry{}} }

// resource returns the shared copy of r and the references it makes,
// decoding them the first time r's content is seen.
func (s *Shared) resource(typeURL, name string, r *anypb.Any) (*anypb.Any, map[string][]string) {
	s.mu.Lock()
	// The lookup converts r's bytes without copying them.
	e, ok := s.entries[sharedKey{typeURL, name, string(r.GetValue())}]
	s.mu.Unlock()
	if ok && e.res.GetTypeUrl() == r.GetTypeUrl() {
		return e.res, e.refs
	}
	e = &sharedEntry{res: r, refs: referencedNames(typeURL, name, r)}
	s.mu.Lock()
	if s.size+len(r.GetValue()) > maxSharedBytes {
		s.entries, s.size = map[sharedKey]*sharedEntry{}, 0
	}
	s.entries[sharedKey{typeURL, name, string(r.GetValue())}] = e
	s.size += len(r.GetValue())
	s.mu.Unlock()
	return e.res, e.refs
}
