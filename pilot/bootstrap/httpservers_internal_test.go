package bootstrap

import (
	"testing"
	"time"
)

// TestDebugServerRoomForProfiles: a server serving /debug/* keeps a write
// timeout above pprof's default 30 s profile, which pprof refuses otherwise.
func TestDebugServerRoomForProfiles(t *testing.T) {
	t.Parallel()
	s := &Server{opts: DefaultOptions()}
	if got := s.httpLimits(true).WithDefaults().WriteTimeout; got <= 30*time.Second {
		t.Errorf("debug server write timeout %v: go tool pprof's 30 s profile is refused", got)
	}
	if got := s.httpLimits(false).WithDefaults().WriteTimeout; got <= 0 || got > time.Minute {
		t.Errorf("write timeout %v, want the default bound", got)
	}
}
