package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestWasmThroughAgent: a WasmPlugin of the pod's namespace with an HTTP
// module URL and its sha256 reaches the stand-in Envoy through the real
// pilot-agent as Envoy needs it: the control plane's ECDS resource (a
// remote module for the agent, as istiod sends) converted by the agent to
// the downloaded module on local disk, with the agent's variables gone.
func TestWasmThroughAgent(t *testing.T) {
	module := append([]byte("\x00asm\x01\x00\x00\x00"), "through-the-agent"...)
	sum := sha256.Sum256(module)
	modules := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(module) }))
	t.Cleanup(modules.Close)
	configDir := copyDir(t, filepath.Join(fixtures.RepoRoot(t), "examples/bookinfo"))
	writeFile(t, configDir, "wasmplugin.yaml", fmt.Sprintf(`apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata:
  name: headers
  namespace: default
spec:
  url: %s/headers.wasm
  sha256: %s
  imagePullPolicy: Always
  phase: STATS
`, modules.URL, hex.EncodeToString(sum[:])))
	srv := bootstraptest.Start(t, controlPlaneOptions(t, configDir, ""))
	dir := podDir(t, srv)
	vars, _, _ := sidecarEnv(t, srv.SecureGRPCListenAddr(), build(t, "pilot/agent/envoy/fakeenvoy"), map[string]string{
		"WASM_CACHE_DIR": filepath.Join(dir, "wasm"),
	})
	startAgent(t, dir, vars)
	client, _ := envoyClient(t, dir, model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType, model.ExtensionConfigType)
	const name = model.WasmPluginResourcePrefix + "default.headers"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := client.WaitFor(ctx, func(c *adsc.Client) bool { return c.Complete() && c.Resources(model.ExtensionConfigType)[name] != nil }); err != nil {
		t.Fatalf("the plugin through the agent: %v (stats %+v)", err, client.Stats())
	}
	tec := &corev3.TypedExtensionConfig{}
	if err := client.Resources(model.ExtensionConfigType)[name].UnmarshalTo(tec); err != nil {
		t.Fatal(err)
	}
	w := &wasmhttpv3.Wasm{}
	if err := tec.GetTypedConfig().UnmarshalTo(w); err != nil {
		t.Fatalf("%s is %s, not the Wasm filter (a fetch failure gives RBAC): %v", name, tec.GetTypedConfig().GetTypeUrl(), err)
	}
	vm := w.GetConfig().GetVmConfig()
	file := vm.GetCode().GetLocal().GetFilename()
	got, err := os.ReadFile(file)
	if err != nil || string(got) != string(module) || !strings.HasPrefix(file, filepath.Join(dir, "wasm")) {
		t.Fatalf("module %q: %q, %v", file, got, err)
	}
	for k := range vm.GetEnvironmentVariables().GetKeyValues() {
		if strings.HasPrefix(k, "ISTIO_META_") {
			t.Errorf("the agent left %s for Envoy", k)
		}
	}
}
