package file

import (
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// normalizeDurations rewrites Go-syntax durations ("1m", "500ms") of a spec
// into protojson's form; see validation.NormalizeDurations.
func normalizeDurations(data []byte, md protoreflect.MessageDescriptor) ([]byte, error) {
	return validation.NormalizeDurations(data, md)
}

// formatDuration writes d in protojson's seconds form.
func formatDuration(d time.Duration) string { return validation.FormatDuration(d) }
