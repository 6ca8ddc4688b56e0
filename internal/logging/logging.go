// Package logging builds the process logger from Istio's --log_output_level.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// ParseLevel reads Istio's --log_output_level ("info", "default:debug",
// "default:info,ads:debug"); meshpilot has one scope, so the "default" entry
// (or a bare level) sets it and other scopes are accepted and ignored.
func ParseLevel(spec string) (slog.Level, error) {
	level := slog.LevelInfo
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		scope, name, ok := strings.Cut(part, ":")
		if !ok {
			scope, name = "default", part
		}
		l, err := levelByName(name)
		if err != nil {
			return 0, fmt.Errorf("--log_output_level %q: scope %q: %w", spec, scope, err)
		}
		if scope == "default" || scope == "all" {
			level = l
		}
	}
	return level, nil
}

func levelByName(name string) (slog.Level, error) {
	switch strings.ToLower(name) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error", "fatal":
		return slog.LevelError, nil
	case "none":
		return slog.LevelError + 100, nil
	}
	return 0, fmt.Errorf("unknown level %q (want debug, info, warn, error or none)", name)
}

// New returns a JSON slog logger at level writing to w, one line per event.
func New(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}
