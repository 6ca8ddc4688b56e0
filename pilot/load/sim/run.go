package sim

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/load/procstat"
	"github.com/meshpilot/meshpilot/pilot/load/stats"
	"github.com/meshpilot/meshpilot/pilot/load/workload"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// Run simulates cfg.Proxies sidecars against cfg.Addr, waits for their
// initial config, applies cfg.Changes marker changes one after another
// (each waited for until every proxy saw it or cfg.Timeout passed), removes
// the markers and returns the figures. Proxies that miss a deadline are
// counted in the report, not returned as an error; errors are for runs that
// could not be measured at all (bad config, /proc unreadable, dial failure).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, tracker: newTracker(), eds: newEDSWatch(), shared: adsc.NewShared()}
	return r.run(ctx)
}

type runner struct {
	cfg     Config
	tracker *tracker
	proxies []*proxy
	report  Report
	eds     *edsWatch
	// shared holds one copy of each distinct resource the proxies hold,
	// its references decoded once (the tool's own cost, see adsc.Shared).
	shared *adsc.Shared
	// rss samples the server's memory (nil without a pid).
	rss *procstat.PeakRSS
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	cfg := r.cfg
	r.report.Run = RunInfo{
		Addr: cfg.Addr, Proxies: cfg.Proxies, Conns: cfg.Conns, Mode: string(cfg.Mode),
		RampPerSec: cfg.Ramp, Namespaces: cfg.Namespaces, Changes: cfg.Changes, PID: cfg.PID,
		TimeoutMs: stats.Millis(cfg.Timeout),
	}
	for _, t := range cfg.Types {
		r.report.Run.Types = append(r.report.Run.Types, model.ShortType(t))
	}
	if cfg.Changer != nil {
		r.report.Run.ChangeSource = cfg.Changer.Name()
		// Markers left by an earlier run would read as already converged.
		if err := cfg.Changer.Cleanup(ctx, cfg.Changes); err != nil {
			return nil, fmt.Errorf("removing old markers: %w", err)
		}
	}
	for i := range cfg.Proxies {
		p, err := newProxy(&cfg, i, r.tracker, r.eds, r.shared)
		if err != nil {
			return nil, err
		}
		r.proxies = append(r.proxies, p)
	}
	conns := make([]*grpc.ClientConn, 0, cfg.Conns)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range cfg.Conns {
		c, err := grpc.NewClient(cfg.Addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
		if err != nil {
			return nil, fmt.Errorf("connection %d to %s: %w", i, cfg.Addr, err)
		}
		conns = append(conns, c)
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	if cfg.PID != 0 {
		r.rss = procstat.WatchRSS(runCtx, cfg.PID, rssInterval)
	}
	m, err := r.startPhase()
	if err != nil {
		return nil, err
	}
	before := m.server
	start := m.start
	ready := r.tracker.expect(readyKey, cfg.Proxies)
	launched := make(chan time.Time, 1)
	wg.Go(func() { r.launch(runCtx, &wg, conns, launched) })

	cfg.Log.Info("waiting for initial config", "proxies", cfg.Proxies, "timeout", cfg.Timeout)
	if err := r.wait(ctx, ready); err != nil {
		return nil, err
	}
	cost, afterInitial, err := m.end()
	if err != nil {
		return nil, err
	}
	r.initialPhase(start, cost)
	select {
	case at := <-launched:
		r.report.Initial.LaunchMs = stats.Millis(at.Sub(start))
	default: // still ramping
	}

	if cfg.Changes > 0 {
		cleaned := false
		defer func() {
			if cleaned {
				return
			}
			// Cancelled or failed mid-run: still take the markers away.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := cfg.Changer.Cleanup(cctx, cfg.Changes); err != nil {
				cfg.Log.Warn("markers not removed", "err", err)
			}
		}()
		for i := range cfg.Changes {
			if err := r.change(ctx, i); err != nil {
				return nil, err
			}
		}
		cleaned = true
		if err := cfg.Changer.Cleanup(ctx, cfg.Changes); err != nil {
			return nil, fmt.Errorf("removing markers: %w", err)
		}
	}
	if cfg.Churn != nil {
		if err := r.churn(ctx); err != nil {
			return nil, err
		}
	}
	after, err := r.sample()
	if err != nil {
		return nil, err
	}
	stop()
	wg.Wait()
	r.totals(start)
	if cfg.PID != 0 {
		r.report.Server = &ServerSamples{Before: procSample(before), AfterInitial: procSample(afterInitial), After: procSample(after)}
	}
	r.medians()
	return &r.report, nil
}

// launch opens the proxies' streams, at cfg.Ramp per second if set. With
// no ramp every proxy's goroutine is started first and held at a gate that
// then opens for all at once, so the streams open together rather than
// in the order goroutines happen to be created. It sends the time the last
// stream was released on launched.
func (r *runner) launch(ctx context.Context, wg *sync.WaitGroup, conns []*grpc.ClientConn, launched chan<- time.Time) {
	if r.cfg.Ramp == 0 {
		gate := make(chan struct{})
		for i, p := range r.proxies {
			wg.Go(func() {
				select {
				case <-ctx.Done():
					return
				case <-gate:
				}
				p.run(ctx, conns[i%len(conns)], r.cfg.MaxBackoff)
			})
		}
		close(gate)
		launched <- time.Now()
		return
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / r.cfg.Ramp))
	defer tick.Stop()
	for i, p := range r.proxies {
		if i > 0 {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		wg.Go(func() { p.run(ctx, conns[i%len(conns)], r.cfg.MaxBackoff) })
	}
	launched <- time.Now()
}

// wait blocks until done closes, cfg.Timeout passes (not an error: the
// report counts the missing) or ctx ends (an error).
func (r *runner) wait(ctx context.Context, done <-chan struct{}) error {
	t := time.NewTimer(r.cfg.Timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.cfg.Log.Warn("phase timed out; reporting the proxies that made it", "timeout", r.cfg.Timeout)
	case <-ctx.Done():
		return fmt.Errorf("run cancelled: %w", ctx.Err())
	}
	return nil
}

func (r *runner) initialPhase(start time.Time, cost PhaseCost) {
	var times []time.Duration
	var last time.Time
	for _, p := range r.proxies {
		s := p.snapshot()
		if s.readyAt.IsZero() {
			continue
		}
		times = append(times, s.readyAt.Sub(s.started))
		if s.readyAt.After(last) {
			last = s.readyAt
		}
	}
	in := &r.report.Initial
	in.Ready, in.Missing = len(times), len(r.proxies)-len(times)
	in.PerProxy = stats.Summarize(times)
	if !last.IsZero() {
		in.TotalMs = stats.Millis(last.Sub(start))
	}
	in.BytesReceived = r.bytes()
	in.PhaseCost = cost
	in.Resources = map[string]int{}
	for _, t := range r.cfg.Types {
		in.Resources[model.ShortType(t)] = len(r.proxies[0].client.Resources(t))
	}
}

// change applies change i and waits for every proxy to see its marker.
func (r *runner) change(ctx context.Context, i int) error {
	marker := workload.MarkerCluster(i)
	c := ChangePhase{Index: i, Marker: marker}
	done := r.tracker.expect(marker, len(r.proxies))
	bytes0 := r.bytes()
	m, err := r.startPhase()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := r.cfg.Changer.Apply(ctx, i); err != nil {
		c.ApplyError = err.Error()
		c.Missing = len(r.proxies)
		r.report.Changes = append(r.report.Changes, c)
		r.cfg.Log.Error("change not applied", "change", i, "err", err)
		return nil
	}
	if err := r.wait(ctx, done); err != nil {
		return err
	}
	cost, _, err := m.end()
	if err != nil {
		return err
	}
	var times []time.Duration
	for _, p := range r.proxies {
		if at, ok := p.snapshot().seen[marker]; ok {
			times = append(times, max(at.Sub(t0), 0))
		}
	}
	c.Converged, c.Missing = len(times), len(r.proxies)-len(times)
	c.Convergence = stats.Summarize(times)
	c.BytesReceived = r.bytes() - bytes0
	c.PhaseCost = cost
	r.cfg.Log.Info("change converged", "change", i, "converged", c.Converged, "missing", c.Missing, "max_ms", c.Convergence.MaxMs)
	r.report.Changes = append(r.report.Changes, c)
	return nil
}

func (r *runner) medians() {
	var p50, p90, p99, mx, cpus []float64
	for _, c := range r.report.Changes {
		if c.Converged == 0 {
			continue
		}
		p50 = append(p50, c.Convergence.P50Ms)
		p90 = append(p90, c.Convergence.P90Ms)
		p99 = append(p99, c.Convergence.P99Ms)
		mx = append(mx, c.Convergence.MaxMs)
		if c.ServerCPUSeconds != nil {
			cpus = append(cpus, *c.ServerCPUSeconds)
		}
	}
	m := &r.report.ChangeMedians
	m.P50Ms, m.P90Ms, m.P99Ms, m.MaxMs = stats.Median(p50), stats.Median(p90), stats.Median(p99), stats.Median(mx)
	if len(cpus) > 0 {
		v := stats.Median(cpus)
		m.ServerCPUSeconds = &v
	}
}

func (r *runner) totals(start time.Time) {
	t := &r.report.Totals
	t.DurationMs = stats.Millis(time.Since(start))
	var lastErr error
	for _, p := range r.proxies {
		st := p.client.Stats()
		t.BytesReceived += st.Bytes
		for _, n := range st.Responses {
			t.Responses += n
		}
		for _, n := range st.NACKs {
			t.NACKs += n
		}
		s := p.snapshot()
		t.Reconnects += s.reconnects
		if s.lastErr != nil {
			lastErr = s.lastErr
		}
	}
	if lastErr != nil {
		t.LastStreamError = lastErr.Error()
	}
}

func (r *runner) bytes() int64 {
	var n int64
	for _, p := range r.proxies {
		n += p.client.Stats().Bytes
	}
	return n
}

// sample reads the server's /proc figures; nil without a pid.
func (r *runner) sample() (*procstat.Sample, error) {
	if r.cfg.PID == 0 {
		return nil, nil
	}
	s, err := procstat.Read(r.cfg.PID)
	if err != nil {
		return nil, fmt.Errorf("server stats (--pid): %w", err)
	}
	return &s, nil
}

func cpuDelta(before, after *procstat.Sample) *float64 {
	if before == nil || after == nil {
		return nil
	}
	// Tick resolution is 10ms; round away float noise.
	v := math.Round(max(after.CPUSeconds-before.CPUSeconds, 0)*1000) / 1000
	return &v
}

func procSample(s *procstat.Sample) ProcSample {
	if s == nil {
		return ProcSample{}
	}
	return ProcSample{CPUSeconds: s.CPUSeconds, RSSBytes: s.RSSBytes}
}
