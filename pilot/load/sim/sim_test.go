package sim

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/load/workload"
)

// startDiscovery serves dir with our discovery server in-process.
func startDiscovery(t *testing.T, dir string) *bootstrap.Server {
	t.Helper()
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	return bootstraptest.Start(t, opts)
}

func testLogger(t *testing.T, level slog.Level) *slog.Logger {
	return bootstraptest.Logger(t, level, nil)
}

// TestSmokeFileMode runs 20 SotW and 20 Delta proxies against a generated
// workload of 20 services × 2 endpoints, applies 2 marker changes through
// the watched directory, and checks correctness only: every proxy got its
// config and saw every change, nothing was NACKed, figures are present and
// non-negative, the JSON round-trips. No timing is asserted.
func TestSmokeFileMode(t *testing.T) {
	dir := t.TempDir()
	objs, err := workload.Generate(workload.Options{Services: 20, Endpoints: 2, Namespaces: 2, Format: workload.FormatServiceEntry, VirtualServices: true, DestinationRules: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workload.WriteDir(dir, objs); err != nil {
		t.Fatal(err)
	}
	srv := startDiscovery(t, dir)

	cfg := DefaultConfig()
	cfg.Addr = srv.GRPCListenAddr()
	cfg.Proxies, cfg.Conns, cfg.Mode, cfg.Namespaces = 40, 4, ModeMixed, 2
	cfg.Changes, cfg.Changer = 2, DirChanger{Dir: dir}
	cfg.PID = os.Getpid()
	cfg.Validate = true
	cfg.Log = testLogger(t, slog.LevelInfo)
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Converged() {
		t.Fatalf("not every proxy converged: initial %+v, changes %+v, last stream error %q", rep.Initial, rep.Changes, rep.Totals.LastStreamError)
	}
	if rep.Totals.NACKs != 0 {
		t.Fatalf("%d NACKs", rep.Totals.NACKs)
	}
	in := rep.Initial
	if in.Ready != 40 || in.PerProxy.Count != 40 || in.TotalMs <= 0 || in.PerProxy.MaxMs < in.PerProxy.P50Ms || in.BytesReceived <= 0 {
		t.Fatalf("initial phase figures: %+v", in)
	}
	// 20 services, each with subsets v1 and v2: 60 outbound clusters plus
	// the fixed ones; every EDS cluster has its assignment.
	if in.Resources["cds"] < 60 || in.Resources["eds"] < 60 || in.Resources["lds"] == 0 || in.Resources["rds"] == 0 {
		t.Fatalf("proxy 0 resources: %v", in.Resources)
	}
	if in.ServerCPUSeconds == nil || *in.ServerCPUSeconds < 0 {
		t.Fatalf("initial server CPU: %v", in.ServerCPUSeconds)
	}
	// The "server" is this process, so its CPU is the tool's too, and its
	// peak RSS is at least what was sampled when the phase ended.
	if in.ToolCPUSeconds <= 0 || in.ServerPeakRSSBytes < rep.Server.AfterInitial.RSSBytes || in.Resets != 0 || in.DurationMs < in.TotalMs {
		t.Fatalf("initial phase cost: %+v, RSS after initial %d", in.PhaseCost, rep.Server.AfterInitial.RSSBytes)
	}
	if len(rep.Changes) != 2 {
		t.Fatalf("changes: got %d, want 2", len(rep.Changes))
	}
	for _, c := range rep.Changes {
		if c.Converged != 40 || c.Convergence.Count != 40 || c.Convergence.P50Ms < 0 || c.Convergence.MaxMs < c.Convergence.P99Ms || c.BytesReceived <= 0 {
			t.Fatalf("change %d figures: %+v", c.Index, c)
		}
		if c.ServerCPUSeconds == nil || *c.ServerCPUSeconds < 0 || c.ServerPeakRSSBytes <= 0 || c.Resets != 0 {
			t.Fatalf("change %d server CPU: %v", c.Index, c.ServerCPUSeconds)
		}
	}
	if rep.Server == nil || rep.Server.After.RSSBytes <= 0 || rep.Server.After.CPUSeconds < rep.Server.Before.CPUSeconds {
		t.Fatalf("server samples: %+v", rep.Server)
	}
	if rep.Totals.BytesReceived < in.BytesReceived || rep.Totals.Responses <= 0 {
		t.Fatalf("totals: %+v", rep.Totals)
	}
	for i := range 2 {
		if _, err := os.Stat(DirChanger{Dir: dir}.MarkerFile(i)); !os.IsNotExist(err) {
			t.Fatalf("marker %d not cleaned up: %v", i, err)
		}
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("report JSON does not parse: %v", err)
	}
	if back.Initial.Ready != 40 || len(back.Changes) != 2 || back.Run.Mode != "mixed" {
		t.Fatalf("report JSON round trip lost figures: %s", b)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"initial", "change 0", "change 1", "median of changes", "NACKs", "tool CPU s", "srv peak RSS MB", "resets"} {
		if !strings.Contains(table.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}
