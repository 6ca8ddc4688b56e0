package sim

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// edsWatch times endpoint changes: for each awaited address of a watched
// cluster, the time from the write that made it ready until each proxy
// subscribed to that cluster holds it as a healthy endpoint. Proxies feed
// it every EDS response; only watched clusters are decoded.
//
// Every subscribed proxy gets the same assignment bytes for a change, so
// each distinct assignment is decoded once and its endpoints' keys kept
// (keys): decoding it once per proxy was 68% of pilot-load's CPU under
// churn at 2,000 proxies, enough to saturate its core, leave proxies
// unread for the server's 10 s send timeout, and have their connections
// closed (the tool timing itself).
type edsWatch struct {
	clusters atomic.Pointer[map[string]bool] // nil: nothing watched

	keysMu sync.Mutex
	// keys holds, by cluster then by assignment bytes, the event keys of
	// the assignment's healthy endpoints; keysBytes is the bytes held.
	keys      map[string]map[string][]string
	keysBytes int
	// decodes counts assignments decoded (tests).
	decodes int

	mu      sync.Mutex
	pending map[string]*edsEvent // "cluster|ip:port" → event
	times   []time.Duration      // every proxy's latency, every event
	slowest []time.Duration      // per finished event, its slowest proxy
}

// edsEvent is one awaited address.
type edsEvent struct {
	t0     time.Time
	seen   []bool // by proxy index
	want   []bool // by proxy index: subscribed when the event began
	left   int
	worst  time.Duration
	closed chan struct{}
}

func newEDSWatch() *edsWatch {
	return &edsWatch{pending: map[string]*edsEvent{}, keys: map[string]map[string][]string{}}
}

// maxKeysBytes bounds the assignment bytes edsWatch keeps decoded; past it
// the cache starts over (a long run must not grow it forever).
const maxKeysBytes = 64 << 20

// watch sets the clusters whose responses are decoded.
func (w *edsWatch) watch(clusters []string) {
	if clusters == nil {
		w.clusters.Store(nil)
		return
	}
	m := make(map[string]bool, len(clusters))
	for _, c := range clusters {
		m[c] = true
	}
	w.clusters.Store(&m)
}

func edsKey(cluster, addr string) string { return cluster + "|" + addr }

// expect registers an event timed from now, to be called just before the
// write that makes addr ("ip:port") ready in cluster: the proxies marked in
// want are to hold it. The returned channel closes when all do.
func (w *edsWatch) expect(cluster, addr string, want []bool) <-chan struct{} {
	e := &edsEvent{seen: make([]bool, len(want)), want: want, closed: make(chan struct{}), t0: time.Now()}
	for _, ok := range want {
		if ok {
			e.left++
		}
	}
	if e.left == 0 {
		close(e.closed)
		return e.closed
	}
	w.mu.Lock()
	w.pending[edsKey(cluster, addr)] = e
	w.mu.Unlock()
	return e.closed
}

// forget drops an event (timed out or abandoned) and returns how many
// subscribed proxies never reported it.
func (w *edsWatch) forget(cluster, addr string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := edsKey(cluster, addr)
	e := w.pending[key]
	if e == nil {
		return 0
	}
	delete(w.pending, key)
	return e.left
}

// observe is called with every EDS response proxy i accepts.
func (w *edsWatch) observe(i int, resources map[string]*anypb.Any) {
	watched := w.clusters.Load()
	if watched == nil {
		return
	}
	now := time.Now()
	for name, a := range resources {
		if !(*watched)[name] {
			continue
		}
		keys, ok := w.eventKeys(name, a)
		if !ok {
			continue // a malformed assignment is the validator's to NACK
		}
		w.mu.Lock()
		for _, key := range keys {
			w.reportLocked(i, key, now)
		}
		w.mu.Unlock()
	}
}

// eventKeys returns the event keys ("cluster|ip:port") of the healthy
// endpoints of cluster's assignment a, decoding a only the first time its
// bytes are seen; false when a does not decode.
func (w *edsWatch) eventKeys(cluster string, a *anypb.Any) ([]string, bool) {
	w.keysMu.Lock()
	// The lookup converts a's bytes without copying them.
	keys, ok := w.keys[cluster][string(a.GetValue())]
	w.keysMu.Unlock()
	if ok {
		return keys, true
	}
	addrs, err := healthyAddrs(a)
	if err != nil {
		return nil, false
	}
	keys = make([]string, len(addrs))
	for k, addr := range addrs {
		keys[k] = edsKey(cluster, addr)
	}
	w.keysMu.Lock()
	defer w.keysMu.Unlock()
	w.decodes++
	if w.keysBytes+len(a.GetValue()) > maxKeysBytes {
		w.keys, w.keysBytes = map[string]map[string][]string{}, 0
	}
	byValue := w.keys[cluster]
	if byValue == nil {
		byValue = map[string][]string{}
		w.keys[cluster] = byValue
	}
	byValue[string(a.GetValue())] = keys
	w.keysBytes += len(a.GetValue())
	return keys, true
}

func (w *edsWatch) reportLocked(i int, key string, now time.Time) {
	e := w.pending[key]
	if e == nil || i >= len(e.seen) || e.seen[i] || !e.want[i] {
		return
	}
	e.seen[i] = true
	d := max(now.Sub(e.t0), 0)
	w.times = append(w.times, d)
	e.worst = max(e.worst, d)
	e.left--
	if e.left == 0 {
		delete(w.pending, key)
		w.slowest = append(w.slowest, e.worst)
		close(e.closed)
	}
}

// results returns the latencies gathered so far and resets them.
func (w *edsWatch) results() (times, slowest []time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	times, slowest = w.times, w.slowest
	w.times, w.slowest = nil, nil
	return times, slowest
}

// healthyAddrs returns the "ip:port" of the endpoints of a
// ClusterLoadAssignment that are HEALTHY or of unknown health.
func healthyAddrs(a *anypb.Any) ([]string, error) {
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := a.UnmarshalTo(cla); err != nil {
		return nil, fmt.Errorf("ClusterLoadAssignment: %w", err)
	}
	var out []string
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			switch lb.GetHealthStatus() {
			case corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNKNOWN:
			default:
				continue
			}
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			if sa == nil {
				continue
			}
			out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	return out, nil
}
