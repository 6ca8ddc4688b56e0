package bootstrap_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// Files over ConfigMaxFileSize and kinds of Istio groups the file source
// does not know are errors: they reach the log, once each, and the gauge
// meshpilot_config_errors.
func TestConfigErrorsGauge(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"big.yaml": "# " + strings.Repeat("x", 2048) + "\n",
		"typo.yaml": `apiVersion: networking.istio.io/v1
kind: VirtualServce
metadata: {name: reviews}
spec: {hosts: [reviews]}
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.ConfigMaxFileSize = 1024
	opts.Log = bootstraptest.Logger(t, slog.LevelInfo, logs)
	srv := bootstraptest.Start(t, opts)
	if v, ok := bootstraptest.Metric(t, srv, "meshpilot_config_errors"); !ok || v != 2 {
		t.Errorf("meshpilot_config_errors = %v (present: %v), want 2", v, ok)
	}
	for _, want := range []string{
		`"file":"big.yaml","index":-1`, `"error":"file is 2051 bytes, over the 1024-byte limit"`,
		`"file":"typo.yaml","index":0,"kind":"VirtualServce"`,
		`"error":"unknown kind \"VirtualServce\" of networking.istio.io; did you mean VirtualService?"`,
	} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("log has %s %d times, want once:\n%s", want, n, logs.String())
		}
	}
}
