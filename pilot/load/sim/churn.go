package sim

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/load/stats"
	"github.com/meshpilot/meshpilot/pilot/load/workload"
)

// ChurnConfig describes an endpoint-churn phase: rolling restarts of the
// first Deployments services of a kube workload generated with --pods,
// writing Pods and EndpointSlices as the kubelet and the endpointslice
// controller would (the test API server runs neither).
type ChurnConfig struct {
	Client dynamic.Interface
	// Workload is the generated workload's shape (services, pods per
	// service as Endpoints, namespaces); Format must be kube.
	Workload workload.Options
	// Deployments are restarted round-robin, one pod at a time each.
	Deployments int
	// PerMinute is the pod replacements per minute, spread evenly.
	PerMinute float64
	// Duration is how long replacements are started for.
	Duration time.Duration
	// Limit, when > 0, ends the phase after that many replacements.
	Limit int
	// MetricsURL is the server's Prometheus endpoint, scraped before and
	// after for full pushes; empty skips that.
	MetricsURL string
}

func (c *ChurnConfig) validate() error {
	o := c.Workload
	switch {
	case c.Client == nil:
		return fmt.Errorf("churn: no Kubernetes client (--kubeconfig)")
	case o.Format != workload.FormatKube:
		return fmt.Errorf("churn: workload format %q, want %q", o.Format, workload.FormatKube)
	case c.Deployments < 1 || o.Endpoints < 1 || o.Namespaces < 1:
		return fmt.Errorf("churn: deployments %d, pods %d, namespaces %d must be >= 1", c.Deployments, o.Endpoints, o.Namespaces)
	case c.PerMinute <= 0 || c.Duration <= 0:
		return fmt.Errorf("churn: rate %v/min and duration %v must be > 0", c.PerMinute, c.Duration)
	}
	return nil
}

// ChurnPhase measures endpoint churn.
type ChurnPhase struct {
	Deployments     int     `json:"deployments"`
	TargetPerMinute float64 `json:"target_per_minute"`
	// Replacements counts pod replacements made; LaunchedPerMinute the rate
	// the ticker started them at (below the target when pilot-load is
	// starved of CPU), AchievedPerMinute the rate until the last one's
	// writes ended (below it too when the API server is slow).
	Replacements      int     `json:"replacements"`
	LaunchedPerMinute float64 `json:"launched_per_minute"`
	AchievedPerMinute float64 `json:"achieved_per_minute"`
	// WriteErrors counts failed API writes; LastWriteError shows one.
	WriteErrors    int    `json:"write_errors"`
	LastWriteError string `json:"last_write_error,omitempty"`
	// Expected counts (replacement, subscribed proxy) pairs: proxies that
	// held the service's EDS cluster when the phase began. Converged of them
	// saw the new address healthy in time, Missing did not.
	Expected  int `json:"expected"`
	Converged int `json:"converged"`
	Missing   int `json:"missing"`
	// EDS summarises, over every pair, the time from just before the
	// EndpointSlice write that made the new address ready until the proxy's
	// EDS held it healthy; Slowest the per-replacement slowest proxy.
	EDS     stats.Summary `json:"eds"`
	Slowest stats.Summary `json:"slowest_per_replacement"`
	// FullPushes is the change of pilot_pushcontext_init_seconds_count over
	// the phase (each full push builds a PushContext); absent without a
	// metrics URL.
	FullPushes *float64 `json:"full_pushes,omitempty"`
	// ServerCores is the server's average CPU use over the phase.
	ServerCores *float64 `json:"server_cores,omitempty"`
	PhaseCost
}

// maxSliceEndpoints is the API server's limit of endpoints in one slice.
const maxSliceEndpoints = 1000

// pod is one current replica of a churned deployment.
type pod struct {
	name string
	ip   netip.Addr
	gen  int
}

// churner holds the rolling restarts' state. Replacements run
// concurrently (API writes may take longer than the ticker's period), one
// at a time per deployment.
type churner struct {
	cfg    *ChurnConfig
	want   [][]bool     // by deployment, by proxy: subscribed to its cluster; read-only
	deploy []sync.Mutex // by deployment: one replacement at a time
	pods   [][]pod      // by deployment, by slot; under deploy[d]

	mu       sync.Mutex // guards the fields below
	phase    *ChurnPhase
	inflight []inflight
}

type inflight struct {
	cluster, addr string
	done          <-chan struct{}
}

// churn runs the churn phase.
func (r *runner) churn(ctx context.Context) error {
	cc := r.cfg.Churn
	o := cc.Workload
	ch := &churner{cfg: cc, phase: &ChurnPhase{Deployments: cc.Deployments, TargetPerMinute: cc.PerMinute}}
	clusters := make([]string, cc.Deployments)
	for d := range cc.Deployments {
		clusters[d] = o.Cluster(d)
		slots := make([]pod, o.Endpoints)
		for k := range slots {
			slots[k] = pod{name: workload.PodName(d, k, 0), ip: o.EndpointIP(d, k)}
		}
		ch.pods = append(ch.pods, slots)
		ch.want = append(ch.want, make([]bool, len(r.proxies)))
	}
	ch.deploy = make([]sync.Mutex, cc.Deployments)
	for p, px := range r.proxies {
		eds := px.client.Resources(model.EndpointType)
		for d, c := range clusters {
			_, ch.want[d][p] = eds[c]
		}
	}
	r.eds.watch(clusters)
	defer r.eds.watch(nil)

	var pushes0 float64
	if cc.MetricsURL != "" {
		var err error
		if pushes0, err = scrapeCounter(ctx, cc.MetricsURL, FullPushMetric); err != nil {
			return err
		}
	}
	m, err := r.startPhase()
	if err != nil {
		return err
	}
	r.cfg.Log.Info("churn started", "deployments", cc.Deployments, "per_minute", cc.PerMinute, "duration", cc.Duration)
	tick := time.NewTicker(time.Duration(float64(time.Minute) / cc.PerMinute))
	defer tick.Stop()
	end := time.NewTimer(cc.Duration)
	defer end.Stop()
	begun := time.Now()
	var wg sync.WaitGroup
	launched := 0
loop:
	for n := 0; ; n++ {
		wg.Go(func() { ch.replace(ctx, n, r) })
		launched++
		if cc.Limit > 0 && n+1 >= cc.Limit {
			break
		}
		select {
		case <-ctx.Done():
			break loop
		case <-end.C:
			break loop
		case <-tick.C:
		}
	}
	ch.phase.LaunchedPerMinute = float64(launched) / time.Since(begun).Minutes()
	wg.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("run cancelled: %w", ctx.Err())
	}
	ch.phase.AchievedPerMinute = float64(ch.phase.Replacements) / time.Since(begun).Minutes()
	if err := ch.settle(ctx, r); err != nil {
		return err
	}
	cost, _, err := m.end()
	if err != nil {
		return err
	}
	ch.phase.PhaseCost = cost
	ch.phase.ServerCores = cost.ServerCores()
	if cc.MetricsURL != "" {
		pushes1, err := scrapeCounter(ctx, cc.MetricsURL, FullPushMetric)
		if err != nil {
			return err
		}
		v := pushes1 - pushes0
		ch.phase.FullPushes = &v
	}
	times, slowest := r.eds.results()
	ch.phase.Converged = len(times)
	ch.phase.EDS, ch.phase.Slowest = stats.Summarize(times), stats.Summarize(slowest)
	r.report.Churn = ch.phase
	r.cfg.Log.Info("churn done", "replacements", ch.phase.Replacements, "converged", ch.phase.Converged, "missing", ch.phase.Missing)
	return nil
}

// replace rolls pod n: deployment n mod D, its slots in turn. It creates
// the new Pod, adds its address to the EndpointSlice not ready, then (the
// timed write) marks it ready and drops the old address, then deletes the
// old Pod. Failed writes are counted, not fatal.
func (ch *churner) replace(ctx context.Context, n int, r *runner) {
	o, c := ch.cfg.Workload, ch.cfg.Client
	d := n % ch.cfg.Deployments
	k := (n / ch.cfg.Deployments) % o.Endpoints
	ch.deploy[d].Lock()
	defer ch.deploy[d].Unlock()
	old := ch.pods[d][k]
	// Replacement n gets address n: unique while the run lasts.
	fresh := pod{name: workload.PodName(d, k, old.gen+1), ip: workload.ReplacementIP(n), gen: old.gen + 1}
	ch.mu.Lock()
	ch.phase.Replacements++
	ch.mu.Unlock()
	fail := func(err error) {
		if ctx.Err() != nil {
			return // cancelled: not a write error
		}
		ch.mu.Lock()
		ch.phase.WriteErrors++
		ch.phase.LastWriteError = err.Error()
		ch.mu.Unlock()
		r.cfg.Log.Warn("churn write failed", "err", err)
	}
	if err := workload.Apply(ctx, c, []workload.Object{o.Pod(d, k, fresh.name, fresh.ip)}, nil); err != nil {
		fail(err)
		return
	}
	eps := make([]workload.SliceEndpoint, 0, o.Endpoints+1)
	for _, p := range ch.pods[d] {
		eps = append(eps, workload.SliceEndpoint{IP: p.ip, Pod: p.name, Ready: true})
	}
	starting := append(eps, workload.SliceEndpoint{IP: fresh.ip, Pod: fresh.name})
	if len(starting) > maxSliceEndpoints {
		// A full slice has no room for a surge: as a Deployment with
		// maxSurge 0, the new pod takes the old one's place, not ready.
		starting = slices.Clone(eps)
		starting[k] = workload.SliceEndpoint{IP: fresh.ip, Pod: fresh.name}
	}
	if err := workload.Apply(ctx, c, []workload.Object{o.EndpointSlice(d, starting)}, nil); err != nil {
		fail(err)
		return
	}
	eps[k] = workload.SliceEndpoint{IP: fresh.ip, Pod: fresh.name, Ready: true}
	cluster, addr := o.Cluster(d), fmt.Sprintf("%s:%d", fresh.ip, workload.TargetPort)
	done := r.eds.expect(cluster, addr, ch.want[d])
	if err := workload.Apply(ctx, c, []workload.Object{o.EndpointSlice(d, eps)}, nil); err != nil {
		r.eds.forget(cluster, addr)
		fail(err)
		return
	}
	ch.pods[d][k] = fresh
	ch.mu.Lock()
	ch.phase.Expected += count(ch.want[d])
	ch.inflight = append(ch.inflight, inflight{cluster: cluster, addr: addr, done: done})
	ch.prune()
	ch.mu.Unlock()
	if err := workload.Delete(ctx, c, []workload.Object{o.Pod(d, k, old.name, old.ip)}); err != nil {
		fail(err)
	}
}

// prune drops finished replacements from the in-flight list; ch.mu is held.
func (ch *churner) prune() {
	kept := ch.inflight[:0]
	for _, f := range ch.inflight {
		select {
		case <-f.done:
		default:
			kept = append(kept, f)
		}
	}
	ch.inflight = kept
}

// settle waits up to the run's timeout for the replacements still in
// flight, then counts the proxies that never saw theirs.
func (ch *churner) settle(ctx context.Context, r *runner) error {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	for _, f := range ch.inflight {
		select {
		case <-f.done:
		case <-wctx.Done():
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("run cancelled: %w", ctx.Err())
	}
	for _, f := range ch.inflight {
		ch.phase.Missing += r.eds.forget(f.cluster, f.addr)
	}
	ch.inflight = nil
	return nil
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
