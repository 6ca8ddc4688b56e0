//go:build unix

package sds_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/meshpilot/meshpilot/pilot/agent/sds/sdstest"
)

// TestFileRefusesFIFO: a FIFO named as a CA bundle is refused as not a
// regular file, without the stream blocking on opening it.
func TestFileRefusesFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := fileServer(t)
	modes(t, func(t *testing.T, delta bool) {
		c := sdstest.Dial(t, srv.path, delta, node, "default", "file-root:"+fifo)
		waitErr(t, c, codes.FailedPrecondition, `"file-root:`+fifo+`"`, "not a regular file")
	})
}
