package envoytest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshpilot/meshpilot/internal/testutil"
)

// RunMain builds fakeenvoy into a temporary directory, sets *binary to it,
// runs the package's tests and removes the directory. Call it from
// TestMain: os.Exit(envoytest.RunMain(m, &fakeEnvoyBinary)).
func RunMain(m *testing.M, binary *string) int {
	dir, err := os.MkdirTemp("", "fakeenvoy")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *binary, err = Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// Fake is one test's fakeenvoy setup.
type Fake struct {
	// Config is the bootstrap file (Envoy's -c).
	Config string
	// RecordFile is where fakeenvoy appends Records (EnvRecord points at it).
	RecordFile string
	// AdminPort is the admin port in the bootstrap, free when NewFake returned.
	AdminPort int
}

// NewFake writes a bootstrap with a free loopback admin port into a
// temporary directory and sets EnvRecord (with t.Setenv) to a record file
// next to it.
func NewFake(t testing.TB) *Fake {
	t.Helper()
	dir := t.TempDir()
	port := testutil.FreePort(t)
	f := &Fake{Config: filepath.Join(dir, "envoy-rev.json"), RecordFile: filepath.Join(dir, "record.jsonl"), AdminPort: port}
	if err := WriteBootstrap(f.Config, port); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvRecord, f.RecordFile)
	return f
}
