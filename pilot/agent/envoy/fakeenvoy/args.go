package main

import (
	"fmt"
	"slices"
	"strconv"
)

// valueFlags are the Envoy flags that take a value, long names; check, when
// set, validates the value as Envoy would.
var valueFlags = map[string]func(string) error{
	"--config-path":              nil,
	"--config-yaml":              nil,
	"--drain-time-s":             uintValue,
	"--parent-shutdown-time-s":   uintValue,
	"--drain-strategy":           oneOf("gradual", "immediate"),
	"--local-address-ip-version": oneOf("v4", "v6"),
	"--file-flush-interval-msec": uintValue,
	"--log-level":                oneOf("trace", "debug", "info", "warning", "warn", "error", "critical", "off"),
	"--component-log-level":      nil,
	"--log-format":               nil,
	"--log-path":                 nil,
	"--concurrency":              uintValue,
	"--service-cluster":          nil,
	"--service-node":             nil,
	"--service-zone":             nil,
	"--base-id":                  uintValue,
	"--restart-epoch":            uintValue,
	"--admin-address-path":       nil,
	"--mode":                     oneOf("serve", "validate", "init_only"),
	"--socket-path":              nil,
	"--socket-mode":              nil,
	"--stats-tag":                nil,
}

// boolFlags are the Envoy flags without a value.
var boolFlags = []string{
	"--disable-hot-restart", "--allow-unknown-static-fields", "--reject-unknown-dynamic-fields",
	"--ignore-unknown-dynamic-fields", "--enable-core-dump", "--log-format-escaped",
	"--use-dynamic-base-id", "--enable-fine-grain-logging", "--disable-extensions",
}

// shortFlags maps Envoy's one-letter flags to their long names.
var shortFlags = map[string]string{"-c": "--config-path", "-l": "--log-level"}

// parseArgs checks args the way Envoy's command line parser would and returns
// the flag values, keyed by long name, plus "-c" for the bootstrap path.
func parseArgs(args []string) (map[string]string, error) {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		name := args[i]
		if long, ok := shortFlags[name]; ok {
			name = long
		}
		if slices.Contains(boolFlags, name) {
			out[name] = "true"
			continue
		}
		check, ok := valueFlags[name]
		if !ok {
			return nil, fmt.Errorf("unknown argument %q", args[i])
		}
		if i+1 >= len(args) {
			return nil, fmt.Errorf("argument %s needs a value", args[i])
		}
		i++
		if check != nil {
			if err := check(args[i]); err != nil {
				return nil, fmt.Errorf("argument %s: %w", name, err)
			}
		}
		out[name] = args[i]
	}
	out["-c"] = out["--config-path"]
	return out, nil
}

func uintValue(v string) error {
	if _, err := strconv.ParseUint(v, 10, 32); err != nil {
		return fmt.Errorf("%q is not a non-negative integer", v)
	}
	return nil
}

func oneOf(allowed ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(allowed, v) {
			return fmt.Errorf("%q is not one of %v", v, allowed)
		}
		return nil
	}
}
