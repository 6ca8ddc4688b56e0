package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/load/sim"
)

func execute(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := newRootCommand(&stdout, &stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return stdout.String(), stderr.String(), err
}

func TestGenWritesALoadableDirectory(t *testing.T) {
	for _, format := range []string{"serviceentry", "kube", "serviceentry-workloadentry"} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			out, _, err := execute(t, "gen", "--services", "10", "--endpoints", "3", "--namespaces", "2",
				"--format", format, "--virtualservices", "--destinationrules", "--sidecars", "--out", dir)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "wrote") {
				t.Fatalf("stdout: %q", out)
			}
			snap, err := file.NewLoader(dir, slog.New(slog.DiscardHandler)).Load()
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Errors) != 0 {
				t.Fatalf("generated files have errors: %v", snap.Errors)
			}
			if len(snap.Configs) == 0 {
				t.Fatal("no configs loaded")
			}
		})
	}
}

func TestGenToStdoutIsDeterministic(t *testing.T) {
	a, _, err := execute(t, "gen", "--services", "3", "--endpoints", "2", "--out", "-")
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := execute(t, "gen", "--services", "3", "--endpoints", "2", "--out", "-")
	if a != b || !strings.Contains(a, "kind: ServiceEntry") {
		t.Fatalf("stdout differs between runs or lacks ServiceEntries:\n%s", a)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gen", "--format", "helm", "--out", "-"}, "format"},
		{[]string{"gen"}, "--out"},
		{[]string{"run", "--delta", "--sotw"}, "pick one"},
		{[]string{"run", "--types", "cds,xds"}, "--types"},
		{[]string{"run", "--change-dir", ".", "--change-cmd", "true"}, "pick one"},
		{[]string{"run", "--changes", "1"}, "change source"},
	} {
		if _, _, err := execute(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error mentioning %q", c.args, err, c.want)
		}
	}
}

// TestRunAgainstDiscovery drives the whole command against our discovery
// server in file mode and reads back the JSON report. Correctness only.
func TestRunAgainstDiscovery(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := execute(t, "gen", "--services", "5", "--endpoints", "2", "--out", dir); err != nil {
		t.Fatal(err)
	}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	srv := bootstraptest.Start(t, opts)

	report := filepath.Join(t.TempDir(), "report.json")
	out, stderr, err := execute(t, "run", "--xds", srv.GRPCListenAddr(), "--proxies", "6", "--conns", "2", "--sotw",
		"--types", "cds,eds", "--ramp", "100", "--changes", "1", "--change-dir", dir,
		"--pid", strconv.Itoa(os.Getpid()), "--json", report, "--timeout", "1m", "--validate")
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	if !strings.Contains(out, "change 0") || !strings.Contains(out, "server pid") {
		t.Fatalf("table:\n%s", out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep sim.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("JSON report does not parse: %v\n%s", err, b)
	}
	if !rep.Converged() || rep.Initial.Ready != 6 || rep.Changes[0].Converged != 6 || rep.Server == nil || rep.Totals.NACKs != 0 {
		t.Fatalf("report: %s", b)
	}
	if strings.Join(rep.Run.Types, ",") != "cds,eds" || rep.Run.Mode != "sotw" {
		t.Fatalf("run echo: %+v", rep.Run)
	}
}
