// Package version reports the build's version.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is stamped at link time: -ldflags "-X github.com/meshpilot/meshpilot/internal/version.Version=v0.1.0".
var Version = "0.1.0-dev"

// Build describes this binary as Istio's version.BuildInfo does.
type Build struct {
	Version string
	// Revision is the VCS revision (12 characters), or "unknown".
	Revision string
	// Status is "Clean" or "Modified" (uncommitted changes), or "unknown".
	Status        string
	GolangVersion string
}

// Current returns the build information of this binary.
func Current() Build {
	b := Build{Version: Version, Revision: "unknown", Status: "unknown", GolangVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				b.Revision = s.Value[:12]
			case s.Key == "vcs.modified" && s.Value == "true":
				b.Status = "Modified"
			case s.Key == "vcs.modified":
				b.Status = "Clean"
			}
		}
	}
	return b
}

// Info is the one-line version string printed by `version` commands.
func Info() string {
	b := Current()
	return fmt.Sprintf("meshpilot version %s (revision %s, %s, %s/%s)", b.Version, b.Revision, b.GolangVersion, runtime.GOOS, runtime.GOARCH)
}
