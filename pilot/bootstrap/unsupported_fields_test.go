package bootstrap_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// The file source's unsupported fields reach the log and the gauge
// meshpilot_config_unsupported_fields{source="file"}.
func TestUnsupportedFieldsGaugeAndLog(t *testing.T) {
	dir := t.TempDir()
	vs := `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: mongo
spec:
  hosts:
  - mongo
  tcp:
  - match:
    - sourceSubnet: 10.0.0.0/8
    route:
    - destination:
        host: mongo
`
	if err := os.WriteFile(filepath.Join(dir, "mongo.yaml"), []byte(vs), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.Log = bootstraptest.Logger(t, slog.LevelInfo, logs)
	srv := bootstraptest.Start(t, opts)
	testutil.Eventually(t, 10*time.Second, "gauge meshpilot_config_unsupported_fields{source=\"file\"} = 1", func() bool {
		v, ok := bootstraptest.Metric(t, srv, `meshpilot_config_unsupported_fields{source="file"}`)
		return ok && v == 1
	})
	for _, want := range []string{`"msg":"config field not applied"`, `"kind":"VirtualService"`, `"name":"mongo"`, `"field":"spec.tcp[0].match[0].sourceSubnet"`, `"origin":"mongo.yaml#0"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
}
