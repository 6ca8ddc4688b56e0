package envoy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/envoy/envoytest"
)

// fakeEnvoyBinary is the fakeenvoy executable built by TestMain.
var fakeEnvoyBinary string

func TestMain(m *testing.M) { os.Exit(envoytest.RunMain(m, &fakeEnvoyBinary)) }

// fake is one fakeenvoy setup: a bootstrap with a free admin port and a record file.
type fake struct {
	config, recordFile string
	port               int
}

func newFake(t *testing.T, env ...string) *fake {
	t.Helper()
	e := envoytest.NewFake(t)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return &fake{config: e.Config, recordFile: e.RecordFile, port: e.AdminPort}
}

func (f *fake) options() Options {
	return Options{
		Binary:                   fakeEnvoyBinary,
		ConfigPath:               f.config,
		AdminPort:                f.port,
		DrainDuration:            45 * time.Second,
		TerminationDrainDuration: 300 * time.Millisecond,
		LogLevel:                 "warning",
	}
}

func (f *fake) records(t *testing.T) []envoytest.Record {
	t.Helper()
	recs, err := envoytest.ReadRecords(f.recordFile)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// eventually polls cond until it returns nil or 20s pass.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testutil.EventuallyNoError(t, 20*time.Second, what, cond)
}

// lockedBuffer is a bytes.Buffer safe for the copy goroutines and the test.
type lockedBuffer = testutil.Buffer

func TestArgs(t *testing.T) {
	o := Options{
		ConfigPath:    "/etc/istio/proxy/envoy-rev.json",
		DrainDuration: 45 * time.Second,
		Concurrency:   2,
		LogLevel:      "warning,misc:error,upstream:debug,bad:x:y",
		ExtraArgs:     []string{"--enable-core-dump"},
	}
	want := []string{
		"-c", "/etc/istio/proxy/envoy-rev.json",
		"--drain-time-s", "45",
		"--drain-strategy", "immediate",
		"--local-address-ip-version", "v4",
		"--file-flush-interval-msec", "1000",
		"--disable-hot-restart",
		"--allow-unknown-static-fields",
		"--log-format", textLogFormat,
		"-l", "warning",
		"--component-log-level", "misc:error,upstream:debug",
		"--enable-core-dump",
		"--concurrency", "2",
	}
	if got := Args(o); !slices.Equal(got, want) {
		t.Errorf("Args:\n got %q\nwant %q", got, want)
	}

	o = Options{ConfigPath: "c.json", DrainDuration: 5 * time.Second, LogAsJSON: true}
	got := Args(o)
	if i := slices.Index(got, "--log-format"); i < 0 || got[i+1] != jsonLogFormat {
		t.Errorf("LogAsJSON: args %q lack the JSON log format", got)
	}
	for _, flag := range []string{"-l", "--concurrency", "--component-log-level"} {
		if slices.Contains(got, flag) {
			t.Errorf("args %q have %s though its option is unset", got, flag)
		}
	}
}

func TestRunForwardsOutputAndArgs(t *testing.T) {
	f := newFake(t, "FAKE_ENVOY_EXIT_AFTER=0s")
	var stdout, stderr lockedBuffer
	o := f.options()
	o.Stdout, o.Stderr = &stdout, &stderr
	o.Concurrency = 2
	o.LogLevel = "info,misc:error"
	o.ExtraArgs = []string{"--enable-core-dump"}
	if err := New(o).Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(stdout.String(), "fakeenvoy: starting (stdout)") {
		t.Errorf("stdout not forwarded: %q", stdout.String())
	}
	if !strings.Contains(stderr.String(), "fakeenvoy: starting (stderr)") {
		t.Errorf("stderr not forwarded: %q", stderr.String())
	}
	recs := f.records(t)
	if len(recs) == 0 || recs[0].Kind != "args" || !slices.Equal(recs[0].Args, Args(o)) {
		t.Errorf("envoy got args %+v, want %q", recs, Args(o))
	}
}

func TestRunPropagatesExitStatus(t *testing.T) {
	f := newFake(t, "FAKE_ENVOY_EXIT_AFTER=0s", "FAKE_ENVOY_EXIT_CODE=3")
	o := f.options()
	o.Stdout, o.Stderr = &lockedBuffer{}, &lockedBuffer{}
	err := New(o).Run(context.Background())
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("Run = %v, want an *exec.ExitError", err)
	}
	if exit.ExitCode() != 3 {
		t.Errorf("exit code %d, want 3", exit.ExitCode())
	}
}

func TestRunEnvoyRejectsArgs(t *testing.T) {
	f := newFake(t)
	var stderr lockedBuffer
	o := f.options()
	o.Stdout, o.Stderr = &lockedBuffer{}, &stderr
	o.ExtraArgs = []string{"--no-such-flag"}
	err := New(o).Run(context.Background())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("Run with an unknown Envoy flag = %v, want exit status 1", err)
	}
	if !strings.Contains(stderr.String(), `unknown argument "--no-such-flag"`) {
		t.Errorf("stderr %q does not name the bad flag", stderr.String())
	}
}

func TestRunStartError(t *testing.T) {
	o := Options{Binary: filepath.Join(t.TempDir(), "no-envoy"), ConfigPath: "x"}
	if err := New(o).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "start") {
		t.Errorf("Run with a missing binary = %v, want a start error", err)
	}
}

func TestRunDrainsThenTerminates(t *testing.T) {
	f := newFake(t)
	o := f.options()
	o.Stdout, o.Stderr = &lockedBuffer{}, &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- New(o).Run(ctx) }()

	// The drain call must reach a running admin server, so wait until Envoy is ready.
	eventually(t, "fakeenvoy ready", func() error { return Ready(ctx, f.port) })
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run after cancel = %v, want nil (fakeenvoy exits 0 on SIGTERM)", err)
	}

	var drain, signal *envoytest.Record
	var order []string
	for _, r := range f.records(t) {
		switch {
		case r.Kind == "admin" && r.Path == "/drain_listeners":
			drain = &r
			order = append(order, "drain")
		case r.Kind == "signal":
			signal = &r
			order = append(order, "signal "+r.Signal)
		}
	}
	if !slices.Equal(order, []string{"drain", "signal SIGTERM"}) {
		t.Fatalf("events %q, want drain then SIGTERM", order)
	}
	if drain.Method != "POST" || drain.Query != "inboundonly&graceful" {
		t.Errorf("drain call %s ?%s, want POST ?inboundonly&graceful", drain.Method, drain.Query)
	}
	gap := time.Duration(signal.UnixNano - drain.UnixNano)
	if gap < o.TerminationDrainDuration {
		t.Errorf("SIGTERM came %v after the drain call, want at least TerminationDrainDuration %v", gap, o.TerminationDrainDuration)
	}
}

func TestRunKillsEnvoyIgnoringSIGTERM(t *testing.T) {
	// sleep ignores nothing, so use a shell that traps SIGTERM.
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("this test needs sh on PATH: %v", err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "envoy")
	started := filepath.Join(dir, "started")
	body := fmt.Sprintf("#!%s\ntrap '' TERM\ntouch %s\nwhile :; do sleep 0.05; done\n", sh, started)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	e := New(Options{Binary: script, ConfigPath: "x", AdminPort: 1, Stdout: &lockedBuffer{}, Stderr: &lockedBuffer{}})
	e.killAfter = 100 * time.Millisecond
	e.waitDelay = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	eventually(t, "script started", func() error { _, err := os.Stat(started); return err })
	cancel()
	err = <-errc
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("Run = %v, want an *exec.ExitError from SIGKILL", err)
	}
	if !strings.Contains(exit.String(), "killed") {
		t.Errorf("exit %q, want killed", exit.String())
	}
}
