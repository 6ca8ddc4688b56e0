package bootstrap_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestEnvoyFilterStatus: EnvoyFilters from the config directory reach a
// connected sidecar's CDS; a patch whose result is not valid Envoy config
// is skipped, logged and counted in pilot_envoy_filter_status, and the
// sidecar still gets valid clusters.
func TestEnvoyFilterStatus(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ef.yaml"), []byte(`apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: add-cluster, namespace: istio-system}
spec:
  configPatches:
  - applyTo: CLUSTER
    patch:
      operation: ADD
      value:
        name: ef_added
        type: STATIC
        connect_timeout: 1s
        load_assignment: {cluster_name: ef_added, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 9}}}}]}]}
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: negative-timeout, namespace: istio-system}
spec:
  configPatches:
  - applyTo: CLUSTER
    match: {cluster: {name: BlackHoleCluster}}
    patch: {operation: MERGE, value: {connect_timeout: -1s}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.Log = bootstraptest.Logger(t, slog.LevelWarn, logs)
	srv := bootstraptest.Start(t, opts)
	c := bootstraptest.RunClient(t, srv, adsc.Config{Types: []string{model.ClusterType},
		Node: bootstraptest.SidecarNode(t, "app-0", "default", "10.244.9.1", map[string]string{"app": "x"})})
	bootstraptest.WaitClient(t, c, "the added cluster", func(c *adsc.Client) bool {
		_, added := c.Resources(model.ClusterType)["ef_added"]
		_, blackhole := c.Resources(model.ClusterType)["BlackHoleCluster"]
		return added && blackhole
	})
	if v := bootstraptest.MetricValue(t, srv, "pilot_envoy_filter_status", `name="istio-system/add-cluster"`, `status="applied"`); v != 1 {
		t.Errorf("add-cluster applied = %v, want 1", v)
	}
	if v := bootstraptest.MetricValue(t, srv, "pilot_envoy_filter_status", `name="istio-system/negative-timeout"`, `status="error"`); v != 1 {
		t.Errorf("negative-timeout error = %v, want 1", v)
	}
	for _, want := range []string{`"msg":"EnvoyFilter patch skipped"`, `"envoyfilter":"istio-system/negative-timeout"`,
		`"field":"spec.configPatches[0] (CLUSTER MERGE)"`, "cluster BlackHoleCluster: result is not valid Envoy config"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
}
