package bootstrap_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
	"github.com/meshpilot/meshpilot/xds/configstatus"
)

const statusService = `apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.96.0.20
  ports: [{name: http, port: 9080}]
`

func statusVS(timeout string) string {
	return `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews]
  http:
  - timeout: ` + timeout + `
    route: [{destination: {host: reviews}}]
`
}

// TestDebugStatusFileMode: with --configDir, a VirtualService change shows
// at /debug/status as applied by the three connected proxies once they
// ACK; the kind, namespace and name parameters filter the list.
func TestDebugStatusFileMode(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("service.yaml", statusService)
	write("vs.yaml", statusVS("5s"))
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.DebugAddr = "127.0.0.1:0"
	srv := bootstraptest.Start(t, opts)
	for i := range 3 {
		c := bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, fmt.Sprintf("client-%d", i), "default", fmt.Sprintf("10.1.0.%d", i+1), nil)})
		bootstraptest.WaitClient(t, c, "initial config", func(c *adsc.Client) bool { return c.HasAll() })
	}
	// Loaded before the first push: not yet tracked.
	if code, body := get(t, srv.DebugListenAddr(), "/debug/status"); code != http.StatusOK || body != "[]\n" && body != "[]" {
		t.Fatalf("/debug/status before any change = %d %q, want an empty list", code, body)
	}
	write("vs.yaml", statusVS("7s"))
	var list []configstatus.ConfigStatus
	testutil.EventuallyNoError(t, 30*time.Second, "the change applied by 3 proxies", func() error {
		code, body := get(t, srv.DebugListenAddr(), "/debug/status?kind=VirtualService&namespace=default&name=reviews")
		if code != http.StatusOK {
			return fmt.Errorf("status %d: %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &list); err != nil {
			return err
		}
		if len(list) != 1 || list[0].Affected != 3 || list[0].Applied != 3 || list[0].AppliedAt == nil {
			return fmt.Errorf("got %s", body)
		}
		return nil
	})
	for _, q := range []string{"?kind=DestinationRule", "?namespace=other", "?name=ratings"} {
		if _, body := get(t, srv.DebugListenAddr(), "/debug/status"+q); body != "[]\n" && body != "[]" {
			t.Errorf("/debug/status%s = %s, want an empty list", q, body)
		}
	}
}
