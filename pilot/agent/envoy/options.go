// Package envoy runs Envoy for the agent: its command line, its lifecycle
// (start, drain on shutdown, stop) and calls to its admin API.
package envoy

import (
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Options says how to run Envoy.
type Options struct {
	// Binary is the Envoy executable (Istio: /usr/local/bin/envoy).
	Binary string
	// ConfigPath is the bootstrap file passed with -c.
	ConfigPath string
	// AdminPort is Envoy's admin port (15000), used to drain on shutdown.
	AdminPort int
	// DrainDuration is ProxyConfig.drainDuration, passed as --drain-time-s.
	DrainDuration time.Duration
	// TerminationDrainDuration is how long to wait after the drain call
	// before stopping Envoy (ProxyConfig.terminationDrainDuration, 5s).
	TerminationDrainDuration time.Duration
	// Concurrency is Envoy's worker thread count; 0 leaves Envoy's default.
	Concurrency int
	// LogLevel is Envoy's log level, optionally with component levels as
	// Istio accepts them: "warning,misc:error,upstream:debug".
	LogLevel string
	// LogAsJSON selects Istio's JSON log format instead of its text one.
	LogAsJSON bool
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
	// Stdout and Stderr receive Envoy's output (nil: the agent's own).
	Stdout, Stderr io.Writer
	// Log is the agent's logger (nil: discard).
	Log *slog.Logger
}

// textLogFormat matches Istio's log lines: time, level, "envoy SCOPE", message.
const textLogFormat = "%Y-%m-%dT%T.%fZ\t%l\tenvoy %n %g:%#\t%v\tthread=%t"

// jsonLogFormat is Istio's JSON log format for Envoy.
const jsonLogFormat = `{"level":"%l","time":"%Y-%m-%dT%T.%fZ","scope":"envoy %n","msg":"%j","caller":"%g:%#","thread":%t}`

// Args returns the Envoy command line Istio's agent uses: the bootstrap file,
// drain settings, a 1s access-log flush, no hot restart, unknown static fields
// allowed, Istio's log format, the log levels and the concurrency.
func Args(o Options) []string {
	args := []string{
		"-c", o.ConfigPath,
		"--drain-time-s", strconv.Itoa(int(o.DrainDuration.Seconds())),
		"--drain-strategy", "immediate",
		"--local-address-ip-version", "v4",
		"--file-flush-interval-msec", "1000",
		"--disable-hot-restart",
		"--allow-unknown-static-fields",
	}
	if o.LogAsJSON {
		args = append(args, "--log-format", jsonLogFormat)
	} else {
		args = append(args, "--log-format", textLogFormat)
	}
	level, components := splitLogLevel(o.LogLevel)
	if level != "" {
		args = append(args, "-l", level)
	}
	if len(components) > 0 {
		args = append(args, "--component-log-level", strings.Join(components, ","))
	}
	args = append(args, o.ExtraArgs...)
	if o.Concurrency > 0 {
		args = append(args, "--concurrency", strconv.Itoa(o.Concurrency))
	}
	return args
}

// splitLogLevel separates "info,misc:error" into the level ("info") and the
// component levels ("misc:error"); items with more than one colon are dropped.
func splitLogLevel(s string) (string, []string) {
	var level string
	var components []string
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		switch strings.Count(item, ":") {
		case 0:
			if item != "" {
				level = item
			}
		case 1:
			components = append(components, item)
		}
	}
	return level, components
}
