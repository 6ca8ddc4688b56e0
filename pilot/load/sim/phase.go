package sim

import (
	"fmt"
	"time"

	"github.com/meshpilot/meshpilot/pilot/load/procstat"
	"github.com/meshpilot/meshpilot/pilot/load/stats"
)

// PhaseCost is what a phase cost both sides: the server's CPU and peak
// memory, pilot-load's own CPU (to tell when the tool is the limit), and
// the streams that broke.
type PhaseCost struct {
	// DurationMs is the phase's wall time.
	DurationMs float64 `json:"duration_ms"`
	// ServerCPUSeconds is the server's CPU time over the phase (with --pid).
	ServerCPUSeconds *float64 `json:"server_cpu_seconds,omitempty"`
	// ServerPeakRSSBytes is the highest server RSS sampled (every 100 ms)
	// while the phase ran (with --pid).
	ServerPeakRSSBytes int64 `json:"server_peak_rss_bytes,omitempty"`
	// ToolCPUSeconds is pilot-load's own CPU time over the phase.
	ToolCPUSeconds float64 `json:"tool_cpu_seconds"`
	// Resets counts proxy streams that ended during the phase (closed by the
	// server or broken) and were reopened.
	Resets int `json:"resets"`
}

// ServerCores is the server's average CPU use over the phase in cores, or
// nil without --pid.
func (c PhaseCost) ServerCores() *float64 {
	if c.ServerCPUSeconds == nil || c.DurationMs <= 0 {
		return nil
	}
	v := *c.ServerCPUSeconds / (c.DurationMs / 1000)
	return &v
}

// rssInterval is how often the server's RSS is sampled.
const rssInterval = 100 * time.Millisecond

// meter is an open phase: readings at its start.
type meter struct {
	r      *runner
	start  time.Time
	server *procstat.Sample
	tool   procstat.Sample
	resets int
}

// startPhase takes the start readings of a phase and opens a new peak-RSS
// window.
func (r *runner) startPhase() (*meter, error) {
	m := &meter{r: r, start: time.Now(), resets: r.resets()}
	var err error
	if m.server, err = r.sample(); err != nil {
		return nil, err
	}
	if m.tool, err = procstat.Self(); err != nil {
		return nil, fmt.Errorf("own CPU: %w", err)
	}
	if r.rss != nil {
		if _, err := r.rss.Take(); err != nil {
			return nil, fmt.Errorf("server RSS (--pid): %w", err)
		}
	}
	return m, nil
}

// end closes the phase and returns its cost and the server reading at its end.
func (m *meter) end() (PhaseCost, *procstat.Sample, error) {
	c := PhaseCost{DurationMs: msSince(m.start), Resets: m.r.resets() - m.resets}
	server, err := m.r.sample()
	if err != nil {
		return c, nil, err
	}
	c.ServerCPUSeconds = cpuDelta(m.server, server)
	tool, err := procstat.Self()
	if err != nil {
		return c, nil, fmt.Errorf("own CPU: %w", err)
	}
	c.ToolCPUSeconds = *cpuDelta(&m.tool, &tool)
	if m.r.rss != nil {
		peak, err := m.r.rss.Take()
		if err != nil {
			return c, nil, fmt.Errorf("server RSS (--pid): %w", err)
		}
		c.ServerPeakRSSBytes = max(peak, server.RSSBytes)
	}
	return c, server, nil
}

func msSince(t time.Time) float64 { return stats.Millis(time.Since(t)) }

// resets sums the proxies' reconnects so far.
func (r *runner) resets() int {
	n := 0
	for _, p := range r.proxies {
		p.mu.Lock()
		n += p.reconnects
		p.mu.Unlock()
	}
	return n
}
