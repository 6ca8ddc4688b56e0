package wasm

import (
	"os"
	"testing"

	httpwasm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	"google.golang.org/protobuf/types/known/anypb"
	extensions "istio.io/api/extensions/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
	cpwasm "github.com/meshpilot/meshpilot/pilot/networking/wasm"
)

// TestControlPlaneOutput: what our control plane's ECDS generator builds
// for a WasmPlugin (pilot/networking/wasm.Build, istiod's format) goes
// through the converter as Envoy needs it: the module fetched over HTTP,
// checked against the plugin's sha256, served as a local file with the same
// bytes, and the agent's variables gone while the plugin's own env stays.
func TestControlPlaneOutput(t *testing.T) {
	body := module("from-control-plane")
	srv := newFileServer(t, body)
	spec := &extensions.WasmPlugin{Url: srv.URL + "/filter.wasm", Sha256: sha(body), PluginName: "root",
		ImagePullPolicy: extensions.PullPolicy_Always, FailStrategy: extensions.FailStrategy_FAIL_CLOSE,
		VmConfig: &extensions.VmConfig{Env: []*extensions.EnvVar{{Name: "MODE", Value: "strict"}}}}
	p := &model.WasmPlugin{Namespace: "default", Name: "auth", ResourceName: model.WasmPluginResourcePrefix + "default.auth", Version: "42", Spec: spec}
	tec, err := cpwasm.Build(p, &model.Proxy{}, "")
	if err != nil {
		t.Fatal(err)
	}
	in, err := anypb.New(tec)
	if err != nil {
		t.Fatal(err)
	}
	cache, _ := newCache(t, Options{})
	out, err := Converter{Fetcher: cache}.Convert(t.Context(), []*anypb.Any{in})
	if err != nil {
		t.Fatal(err)
	}
	ec, w := decode(t, out[0], &httpwasm.Wasm{})
	if ec.GetName() != p.ResourceName {
		t.Errorf("resource %q", ec.GetName())
	}
	vm := w.GetConfig().GetVmConfig()
	file := vm.GetCode().GetLocal().GetFilename()
	got, err := os.ReadFile(file)
	if err != nil || string(got) != string(body) {
		t.Fatalf("local module %q: %q, %v", file, got, err)
	}
	env := vm.GetEnvironmentVariables().GetKeyValues()
	if len(env) != 1 || env["MODE"] != "strict" {
		t.Errorf("env after conversion %v, want only the plugin's MODE", env)
	}
	if w.GetConfig().GetRootId() != "root" || w.GetConfig().GetName() != "default.auth" {
		t.Errorf("plugin config %v", w.GetConfig())
	}
}
