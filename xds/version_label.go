package xds

import (
	"sync"
)

// pilot_xds is labelled by the proxy's ISTIO_VERSION, a string any client
// of the plaintext port chooses. versionLabels keeps that label set small:
// a value that is not a plausible version is "invalid", and once
// maxVersionLabels distinct values have been seen, new ones are "other".
const (
	maxVersionLabels = 32
	maxVersionLen    = 64
)

// versionLabels remembers the ISTIO_VERSION labels in use.
type versionLabels struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// label returns the pilot_xds label for an ISTIO_VERSION.
func (v *versionLabels) label(version string) string {
	switch {
	case version == "":
		return "unknown"
	case !plausibleVersion(version):
		return "invalid"
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.seen[version]; ok {
		return version
	}
	if len(v.seen) >= maxVersionLabels {
		return "other"
	}
	if v.seen == nil {
		v.seen = map[string]struct{}{}
	}
	v.seen[version] = struct{}{}
	return version
}

// plausibleVersion accepts what Istio versions look like (1.24.2,
// 1.25-alpha.7ab3, 1.22.0-distroless+build): letters, digits and . - _ +.
func plausibleVersion(s string) bool {
	if len(s) > maxVersionLen {
		return false
	}
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '.', r == '-', r == '_', r == '+':
		default:
			return false
		}
	}
	return true
}
