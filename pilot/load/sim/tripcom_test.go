package sim

import (
	"log/slog"
	"testing"

	"github.com/meshpilot/meshpilot/pilot/load/workload"
)

// TestServiceEntryWorkloadEntryShape serves the Trip.com shape (selector
// ServiceEntries + WorkloadEntries, a Sidecar per namespace) from files and
// checks that each proxy gets only its own namespace's services, and that
// the markers, in a namespace the Sidecars export, still reach every proxy.
func TestServiceEntryWorkloadEntryShape(t *testing.T) {
	dir := t.TempDir()
	objs, err := workload.Generate(workload.Options{Services: 20, Endpoints: 2, Namespaces: 4, Format: workload.FormatWorkloadEntry, Sidecars: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workload.WriteDir(dir, objs); err != nil {
		t.Fatal(err)
	}
	srv := startDiscovery(t, dir)

	cfg := DefaultConfig()
	cfg.Addr = srv.GRPCListenAddr()
	cfg.Proxies, cfg.Conns, cfg.Mode, cfg.Namespaces = 12, 2, ModeMixed, 4
	cfg.Changes, cfg.Changer = 2, DirChanger{Dir: dir}
	cfg.Validate = true
	cfg.Log = testLogger(t, slog.LevelInfo)
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Converged() || rep.Totals.NACKs != 0 {
		t.Fatalf("initial %+v, changes %+v, NACKs %d, last stream error %q", rep.Initial, rep.Changes, rep.Totals.NACKs, rep.Totals.LastStreamError)
	}
	// Proxy 0 is in ns-0, which holds 5 of the 20 services: the Sidecar
	// keeps the other 15 away.
	if got := rep.Initial.Resources["eds"]; got != 5 {
		t.Fatalf("proxy 0 holds %d EDS clusters, want its namespace's 5 (resources %v)", got, rep.Initial.Resources)
	}
}
