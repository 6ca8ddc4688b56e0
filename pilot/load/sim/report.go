package sim

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/meshpilot/meshpilot/pilot/load/stats"
)

// Report holds every figure of a run. It is written as JSON with the field
// names below; durations are milliseconds (_ms), memory bytes (_bytes), CPU
// seconds (_seconds).
type Report struct {
	// Run echoes the configuration.
	Run RunInfo `json:"run"`
	// Initial is the connect phase: from the first stream opened until every
	// proxy had CDS+LDS and every EDS/RDS resource they referenced.
	Initial InitialPhase `json:"initial"`
	// Changes has one entry per marker change, in order.
	Changes []ChangePhase `json:"changes"`
	// ChangeMedians are the medians across changes of each change's figures.
	ChangeMedians ChangeMedians `json:"change_medians"`
	// Churn is the endpoint-churn phase, when run.
	Churn *ChurnPhase `json:"churn,omitempty"`
	// Totals cover the whole run.
	Totals Totals `json:"totals"`
	// Server has /proc samples of the control plane (absent without --pid).
	Server *ServerSamples `json:"server,omitempty"`
}

// RunInfo echoes what was simulated.
type RunInfo struct {
	Addr         string   `json:"addr"`
	Proxies      int      `json:"proxies"`
	Conns        int      `json:"conns"`
	Mode         string   `json:"mode"`
	Types        []string `json:"types"`
	RampPerSec   float64  `json:"ramp_per_sec"`
	Namespaces   int      `json:"namespaces"`
	Changes      int      `json:"changes"`
	ChangeSource string   `json:"change_source,omitempty"`
	PID          int      `json:"pid,omitempty"`
	TimeoutMs    float64  `json:"timeout_ms"`
}

// InitialPhase measures initial configuration.
type InitialPhase struct {
	// Ready counts proxies that got their full initial config; Missing the
	// rest (timed out).
	Ready   int `json:"ready"`
	Missing int `json:"missing"`
	// TotalMs is from the first stream opened until the last proxy was ready.
	TotalMs float64 `json:"total_ms"`
	// PerProxy summarises each ready proxy's time from its own stream start.
	PerProxy stats.Summary `json:"per_proxy"`
	// LaunchMs is from the phase's start until the last stream was released
	// (with no ramp all are released together through one gate).
	LaunchMs float64 `json:"launch_ms"`
	// BytesReceived is what all proxies received by the end of the phase.
	BytesReceived int64 `json:"bytes_received"`
	PhaseCost
	// Resources counts, by short type ("cds"), the resources proxy 0 held at
	// the end of the phase: a check that the workload reached the proxies.
	Resources map[string]int `json:"resources_proxy0"`
}

// ChangePhase measures one change: from just before it was applied until
// each proxy's CDS first held the marker cluster.
type ChangePhase struct {
	Index  int    `json:"index"`
	Marker string `json:"marker_cluster"`
	// Converged counts proxies that saw the marker; Missing those that did not in time.
	Converged int `json:"converged"`
	Missing   int `json:"missing"`
	// Convergence summarises per-proxy times from t0.
	Convergence stats.Summary `json:"convergence"`
	// BytesReceived is what all proxies received during the change.
	BytesReceived int64 `json:"bytes_received"`
	PhaseCost
	// ApplyError is set when the change could not be applied.
	ApplyError string `json:"apply_error,omitempty"`
}

// ChangeMedians are medians across changes.
type ChangeMedians struct {
	P50Ms            float64  `json:"p50_ms"`
	P90Ms            float64  `json:"p90_ms"`
	P99Ms            float64  `json:"p99_ms"`
	MaxMs            float64  `json:"max_ms"`
	ServerCPUSeconds *float64 `json:"server_cpu_seconds,omitempty"`
}

// Totals cover the whole run.
type Totals struct {
	DurationMs    float64 `json:"duration_ms"`
	BytesReceived int64   `json:"bytes_received"`
	Responses     int     `json:"responses"`
	NACKs         int     `json:"nacks"`
	Reconnects    int     `json:"reconnects"`
	// LastStreamError is one example of why a stream broke, if any did.
	LastStreamError string `json:"last_stream_error,omitempty"`
}

// ServerSamples are /proc readings of the server at phase boundaries.
type ServerSamples struct {
	Before       ProcSample `json:"before"`
	AfterInitial ProcSample `json:"after_initial"`
	After        ProcSample `json:"after"`
}

// ProcSample is one reading of the server process.
type ProcSample struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	RSSBytes   int64   `json:"rss_bytes"`
}

// Converged reports whether every proxy got its initial config and saw
// every change.
func (r *Report) Converged() bool {
	if r.Initial.Missing > 0 || len(r.Changes) != r.Run.Changes {
		return false
	}
	for _, c := range r.Changes {
		if c.Missing > 0 || c.ApplyError != "" {
			return false
		}
	}
	if c := r.Churn; c != nil && (c.Missing > 0 || c.WriteErrors > 0) {
		return false
	}
	return true
}

// WriteTable prints the report for people.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "pilot-load: %d proxies (%s) over %d conns to %s, types %v\n\n", r.Run.Proxies, r.Run.Mode, r.Run.Conns, r.Run.Addr, r.Run.Types)
	fmt.Fprintf(tw, "phase\tproxies ok\tmissing\tp50 ms\tp90 ms\tp99 ms\tmax ms\ttotal ms\tMB recv\t%s\t\n", costHeader)
	in := r.Initial
	fmt.Fprintf(tw, "initial\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%s\t\n", in.Ready, in.Missing,
		in.PerProxy.P50Ms, in.PerProxy.P90Ms, in.PerProxy.P99Ms, in.PerProxy.MaxMs, in.TotalMs, mb(in.BytesReceived), in.PhaseCost.columns())
	for _, c := range r.Changes {
		fmt.Fprintf(tw, "change %d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%.2f\t%s\t\n", c.Index, c.Converged, c.Missing,
			c.Convergence.P50Ms, c.Convergence.P90Ms, c.Convergence.P99Ms, c.Convergence.MaxMs, "-", mb(c.BytesReceived), c.PhaseCost.columns())
	}
	if len(r.Changes) > 0 {
		m := r.ChangeMedians
		fmt.Fprintf(tw, "median of changes\t\t\t%.1f\t%.1f\t%.1f\t%.1f\t\t\t%s\t\t\t\t\n", m.P50Ms, m.P90Ms, m.P99Ms, m.MaxMs, cpu(m.ServerCPUSeconds))
	}
	if c := r.Churn; c != nil {
		fmt.Fprintf(tw, "churn EDS\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", c.Converged, c.Missing,
			c.EDS.P50Ms, c.EDS.P90Ms, c.EDS.P99Ms, c.EDS.MaxMs, c.DurationMs, "-", c.PhaseCost.columns())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c := r.Churn; c != nil {
		pushes := "-"
		if c.FullPushes != nil {
			pushes = fmt.Sprintf("%.0f", *c.FullPushes)
		}
		fmt.Fprintf(w, "\nchurn: %d deployments, %d pod replacements (launched %.0f/min, done %.0f/min, target %.0f), %d write errors; %d of %d (replacement, proxy) pairs converged; slowest proxy per replacement p50 %.1f ms p99 %.1f ms; server %s cores; full pushes %s\n",
			c.Deployments, c.Replacements, c.LaunchedPerMinute, c.AchievedPerMinute, c.TargetPerMinute, c.WriteErrors, c.Converged, c.Expected,
			c.Slowest.P50Ms, c.Slowest.P99Ms, cpu(c.ServerCores), pushes)
		if c.LastWriteError != "" {
			fmt.Fprintf(w, "last write error: %s\n", c.LastWriteError)
		}
	}
	if len(in.Resources) > 0 {
		fmt.Fprintf(w, "\nproxy 0 initial resources: %v\n", in.Resources)
	}
	t := r.Totals
	fmt.Fprintf(w, "\ntotal: %.1f s, %.2f MB received, %d responses, %d NACKs, %d reconnects\n",
		t.DurationMs/1000, mb(t.BytesReceived), t.Responses, t.NACKs, t.Reconnects)
	if t.LastStreamError != "" {
		fmt.Fprintf(w, "last stream error: %s\n", t.LastStreamError)
	}
	if s := r.Server; s != nil {
		fmt.Fprintf(w, "server pid %d: CPU %.2f s → %.2f s → %.2f s; RSS %.1f MB → %.1f MB → %.1f MB (before, after initial, after)\n",
			r.Run.PID, s.Before.CPUSeconds, s.AfterInitial.CPUSeconds, s.After.CPUSeconds,
			mb(s.Before.RSSBytes), mb(s.AfterInitial.RSSBytes), mb(s.After.RSSBytes))
	}
	return nil
}

// costHeader heads the PhaseCost columns of the table.
const costHeader = "srv CPU s\tsrv cores\ttool CPU s\tsrv peak RSS MB\tresets"

// columns formats the cost under costHeader.
func (c PhaseCost) columns() string {
	rss := "-"
	if c.ServerPeakRSSBytes > 0 {
		rss = fmt.Sprintf("%.1f", mb(c.ServerPeakRSSBytes))
	}
	return fmt.Sprintf("%s\t%s\t%.2f\t%s\t%d", cpu(c.ServerCPUSeconds), cpu(c.ServerCores()), c.ToolCPUSeconds, rss, c.Resets)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func cpu(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}
