package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/load/workload"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// markerPrefix starts the cluster name of every marker ServiceEntry.
var markerPrefix = fmt.Sprintf("outbound|%d||marker-", workload.ServicePort)

// proxy is one simulated sidecar: an adsc client on one ADS stream,
// reopened with jittered exponential backoff whenever it breaks.
type proxy struct {
	index   int
	delta   bool
	client  *adsc.Client
	tracker *tracker
	eds     *edsWatch
	check   bool // validate every resource

	mu         sync.Mutex
	started    time.Time            // first stream opened
	readyAt    time.Time            // initial config complete
	seen       map[string]time.Time // marker cluster → first time in CDS
	reconnects int
	lastErr    error
}

// ProxyIP returns the address of proxy i, in 10.64.0.0/10.
func ProxyIP(i int) netip.Addr {
	n := i + 1
	return netip.AddrFrom4([4]byte{10, 64 + byte(n>>16), byte(n >> 8), byte(n)})
}

// Node returns the Envoy node Istio's agent would send for proxy i.
func Node(cfg *Config, i int) (*corev3.Node, error) {
	ns := workload.Namespace(i % cfg.Namespaces)
	pod := fmt.Sprintf("load-%d", i)
	ip := ProxyIP(i).String()
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE":         ns,
		"LABELS":            map[string]any{"app": "load", "version": "v1"},
		"INSTANCE_IPS":      ip,
		"ISTIO_VERSION":     cfg.IstioVersion,
		"SERVICE_ACCOUNT":   "load",
		"CLUSTER_ID":        cfg.ClusterID,
		"INTERCEPTION_MODE": "REDIRECT",
		"WORKLOAD_NAME":     "load",
	})
	if err != nil {
		return nil, fmt.Errorf("proxy %d: node metadata: %w", i, err)
	}
	return &corev3.Node{
		Id:       fmt.Sprintf("%s~%s~%s.%s~%s.svc.cluster.local", model.SidecarProxy, ip, pod, ns, ns),
		Cluster:  "load." + ns,
		Metadata: md,
	}, nil
}

func newProxy(cfg *Config, i int, t *tracker, eds *edsWatch, shared *adsc.Shared) (*proxy, error) {
	node, err := Node(cfg, i)
	if err != nil {
		return nil, err
	}
	p := &proxy{index: i, tracker: t, eds: eds, check: cfg.Validate, seen: map[string]time.Time{}}
	p.delta = cfg.Mode == ModeDelta || (cfg.Mode == ModeMixed && i%2 == 1)
	ac := adsc.Config{Node: node, Delta: p.delta, Types: cfg.Types, OnResponse: p.onResponse, NACK: p.inspect, Shared: shared}
	p.client = adsc.New(ac)
	return p, nil
}

// inspect sees every response before it is stored (adsc's NACK hook): EDS
// responses go to the endpoint watch, and with --validate every resource is
// validated; an error NACKs the response.
func (p *proxy) inspect(typeURL string, resources map[string]*anypb.Any) error {
	if p.check {
		if err := validate(typeURL, resources); err != nil {
			return err
		}
	}
	if typeURL == model.EndpointType && p.eds != nil {
		p.eds.observe(p.index, resources)
	}
	return nil
}

// onResponse runs on the stream's goroutine after each accepted response.
func (p *proxy) onResponse(typeURL string, names []string, _ int) {
	now := time.Now()
	var markers []string
	if typeURL == model.ClusterType {
		for _, n := range names {
			if strings.HasPrefix(n, markerPrefix) {
				markers = append(markers, n)
			}
		}
	}
	complete := p.client.Complete()
	p.mu.Lock()
	var fresh []string
	for _, m := range markers {
		if _, ok := p.seen[m]; !ok {
			p.seen[m] = now
			fresh = append(fresh, m)
		}
	}
	becameReady := complete && p.readyAt.IsZero()
	if becameReady {
		p.readyAt = now
	}
	p.mu.Unlock()
	for _, m := range fresh {
		p.tracker.done(m)
	}
	if becameReady {
		p.tracker.done(readyKey)
	}
}

// run serves the proxy's stream until ctx ends, reconnecting after each
// failure with jittered exponential backoff from 100ms up to maxBackoff.
// A stream that lived longer than the cap resets the backoff.
func (p *proxy) run(ctx context.Context, conn grpc.ClientConnInterface, maxBackoff time.Duration) {
	p.mu.Lock()
	p.started = time.Now()
	p.mu.Unlock()
	const initialBackoff = 100 * time.Millisecond
	backoff := initialBackoff
	for {
		opened := time.Now()
		err := p.client.Run(ctx, conn)
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		p.reconnects++
		p.lastErr = err
		p.mu.Unlock()
		if time.Since(opened) > maxBackoff {
			backoff = initialBackoff
		}
		// Full jitter over [backoff/2, backoff).
		wait := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// snapshot is what the report needs from a proxy, read under its lock.
type snapshot struct {
	started, readyAt time.Time
	seen             map[string]time.Time
	reconnects       int
	lastErr          error
}

func (p *proxy) snapshot() snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := make(map[string]time.Time, len(p.seen))
	for k, v := range p.seen {
		seen[k] = v
	}
	return snapshot{started: p.started, readyAt: p.readyAt, seen: seen, reconnects: p.reconnects, lastErr: p.lastErr}
}

// validate NACKs a response holding a resource that fails ValidateAll.
func validate(typeURL string, resources map[string]*anypb.Any) error {
	for name, a := range resources {
		m, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("%s %s: %w", model.ShortType(typeURL), name, err)
		}
		if v, ok := m.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				return fmt.Errorf("%s %s: %w", model.ShortType(typeURL), name, err)
			}
		}
	}
	return nil
}
