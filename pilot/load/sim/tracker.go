package sim

import "sync"

// readyKey is the tracker key of "initial config complete".
const readyKey = "\x00ready"

// tracker counts down, per key, the proxies that still have to reach a
// state (initial config, or a marker seen), and closes a channel when none
// are left, so the runner waits without polling.
type tracker struct {
	mu   sync.Mutex
	left map[string]int
	all  map[string]chan struct{}
}

func newTracker() *tracker {
	return &tracker{left: map[string]int{}, all: map[string]chan struct{}{}}
}

// expect registers key with n proxies to go and returns the channel closed
// when all have reported. Reports for keys not expected are ignored.
func (t *tracker) expect(key string, n int) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := make(chan struct{})
	t.left[key], t.all[key] = n, ch
	if n <= 0 {
		close(ch)
	}
	return ch
}

// done records that one proxy reached key; each proxy reports a key once.
func (t *tracker) done(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.left[key]
	if !ok || n <= 0 {
		return
	}
	t.left[key] = n - 1
	if n == 1 {
		close(t.all[key])
	}
}
