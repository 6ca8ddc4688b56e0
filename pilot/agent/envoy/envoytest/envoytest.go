// Package envoytest helps tests run fakeenvoy, the stand-in Envoy in
// pilot/agent/envoy/fakeenvoy: build it, write a bootstrap it reads, and read
// back what it recorded.
package envoytest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// FakeEnvoyPackage is fakeenvoy's import path.
const FakeEnvoyPackage = "github.com/meshpilot/meshpilot/pilot/agent/envoy/fakeenvoy"

// Environment variables fakeenvoy reads.
const (
	// EnvRecord names the file fakeenvoy appends Records to.
	EnvRecord = "FAKE_ENVOY_RECORD"
	// EnvExitCode is the exit status on SIGTERM or when exiting by itself.
	EnvExitCode = "FAKE_ENVOY_EXIT_CODE"
	// EnvExitAfter makes fakeenvoy exit by itself after this Go duration.
	EnvExitAfter = "FAKE_ENVOY_EXIT_AFTER"
	// EnvServerState is the server.state stat (0 LIVE, 3 INITIALIZING).
	EnvServerState = "FAKE_ENVOY_SERVER_STATE"
	// EnvWorkersStarted is the listener_manager.workers_started stat.
	EnvWorkersStarted = "FAKE_ENVOY_WORKERS_STARTED"
)

// Record kinds.
const (
	KindArgs   = "args"   // the command line, first record
	KindAdmin  = "admin"  // one admin API call
	KindSignal = "signal" // a signal received (SIGTERM, SIGINT)
	KindExit   = "exit"   // exiting with Code
)

// Record is one line of fakeenvoy's record file.
type Record struct {
	// UnixNano is when fakeenvoy saw the event.
	UnixNano int64    `json:"unixNano"`
	Kind     string   `json:"kind"`
	Args     []string `json:"args,omitempty"`
	Method   string   `json:"method,omitempty"`
	Path     string   `json:"path,omitempty"`
	Query    string   `json:"query,omitempty"`
	Signal   string   `json:"signal,omitempty"`
	Code     int      `json:"code,omitempty"`
}

// Build compiles fakeenvoy into dir and returns the executable's path (named
// "envoy"). It runs the go tool from PATH, or from GOROOT if PATH lacks it.
func Build(dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(dir, "envoy")
	cmd := exec.Command(goTool, "build", "-o", out, FakeEnvoyPackage)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build fakeenvoy with %s (the go tool is needed to build the stand-in Envoy): %w\n%s", goTool, err, msg)
	}
	return out, nil
}

// WriteBootstrap writes a minimal JSON bootstrap with the admin port fakeenvoy
// (and Envoy) read: admin.address.socket_address.port_value.
func WriteBootstrap(path string, adminPort int) error {
	b := fmt.Sprintf(`{"node":{"id":"sidecar~10.0.0.1~app.default~default.svc.cluster.local"},`+
		`"admin":{"address":{"socket_address":{"address":"127.0.0.1","port_value":%d}}}}`, adminPort)
	if err := os.WriteFile(path, []byte(b), 0o644); err != nil {
		return fmt.Errorf("write bootstrap %s: %w", path, err)
	}
	return nil
}

// ReadRecords reads a record file; a file not yet created holds no records.
func ReadRecords(path string) ([]Record, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	var out []Record
	for i, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("records %s line %d: %w", path, i+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}
