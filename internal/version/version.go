// Package version reports the build's version.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is stamped at link time: -ldflags "-X github.com/meshpilot/meshpilot/internal/version.Version=v0.1.0".
var Version = "0.1.0-dev"

// Info is the one-line version string printed by `version` commands.
func Info() string {
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("meshpilot version %s (revision %s, %s, %s/%s)", Version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
