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
type edsWatch struct {
	clusters atomic.Pointer[map[string]bool] // nil: nothing watched

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

func newEDSWatch() *edsWatch { return &edsWatch{pending: map[string]*edsEvent{}} }

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
		addrs, err := healthyAddrs(a)
		if err != nil {
			continue // a malformed assignment is the validator's to NACK
		}
		w.mu.Lock()
		for _, addr := range addrs {
			w.reportLocked(i, edsKey(name, addr), now)
		}
		w.mu.Unlock()
	}
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
