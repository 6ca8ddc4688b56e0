package wasm

import (
	"bytes"
	"strings"
	"testing"

	xdstype "github.com/cncf/xds/go/udpa/type/v1"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httprbac "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	httpwasm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	netrbac "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	netwasm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// pluginConfig is what istiod sends for a WasmPlugin with a remote URL.
func pluginConfig(url, sha string, policy wasmv3.FailurePolicy, env map[string]string) *wasmv3.PluginConfig {
	return &wasmv3.PluginConfig{
		Name:          "default.plugin",
		RootId:        "root",
		Configuration: mustAny(wrapperspb.String(`{"key":"value"}`)),
		FailurePolicy: policy,
		Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
			Runtime: "envoy.wasm.runtime.v8",
			Code: &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Remote{Remote: &corev3.RemoteDataSource{
				HttpUri: &corev3.HttpUri{Uri: url, HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: "_"}, Timeout: durationpb.New(30e9)},
				Sha256:  sha,
			}}},
			EnvironmentVariables: &wasmv3.EnvironmentVariables{KeyValues: env},
		}},
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

func extensionConfig(name string, filter proto.Message) *anypb.Any {
	return mustAny(&corev3.TypedExtensionConfig{Name: name, TypedConfig: mustAny(filter)})
}

func decode[T proto.Message](t *testing.T, a *anypb.Any, into T) (*corev3.TypedExtensionConfig, T) {
	t.Helper()
	ec := &corev3.TypedExtensionConfig{}
	if err := a.UnmarshalTo(ec); err != nil {
		t.Fatal(err)
	}
	if err := ec.GetTypedConfig().UnmarshalTo(into); err != nil {
		t.Fatalf("%s: typed_config is %s: %v", ec.GetName(), ec.GetTypedConfig().GetTypeUrl(), err)
	}
	return ec, into
}

// TestConvertRemote: an HTTP Wasm filter with remote code gets the cached
// file, the agent's ISTIO_META_* variables are gone (others stay), the
// rest of the plugin is unchanged, and the input is not modified.
func TestConvertRemote(t *testing.T) {
	m := module("convert")
	srv := newFileServer(t, m)
	c, _ := newCache(t, Options{})
	const name = "extensions.istio.io/wasmplugin/default.plugin"
	env := map[string]string{
		pullSecretEnv: `{"auths":{}}`, pullPolicyEnv: "IfNotPresent", resourceVersionEnv: "7", "USER_VAR": "kept",
	}
	in := extensionConfig(name, &httpwasm.Wasm{Config: pluginConfig(srv.URL+"/m.wasm", sha(m), wasmv3.FailurePolicy_FAIL_CLOSED, env)})
	orig := proto.Clone(in)

	out, err := Converter{Fetcher: c}.Convert(t.Context(), []*anypb.Any{in})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, orig) {
		t.Fatal("Convert modified its input")
	}
	ec, w := decode(t, out[0], &httpwasm.Wasm{})
	if ec.GetName() != name {
		t.Fatalf("name %q", ec.GetName())
	}
	vm := w.GetConfig().GetVmConfig()
	file := vm.GetCode().GetLocal().GetFilename()
	if file == "" || !bytes.Equal(readFile(t, file), m) {
		t.Fatalf("code %v, want the cached module", vm.GetCode())
	}
	if kv := vm.GetEnvironmentVariables().GetKeyValues(); len(kv) != 1 || kv["USER_VAR"] != "kept" {
		t.Fatalf("environment %v, want only USER_VAR", kv)
	}
	if w.GetConfig().GetRootId() != "root" || w.GetConfig().GetName() != "default.plugin" || vm.GetRuntime() != "envoy.wasm.runtime.v8" {
		t.Fatalf("plugin config changed: %v", w.GetConfig())
	}
}

// TestConvertFailure: a module that cannot be fetched (sha256 mismatch)
// becomes an RBAC filter of the same name: allow-all for FAIL_OPEN (or the
// old fail_open), deny-all for FAIL_CLOSED and FAIL_RELOAD; HTTP or network.
func TestConvertFailure(t *testing.T) {
	srv := newFileServer(t, module("real"))
	c, _ := newCache(t, Options{})
	wrong := sha([]byte("expected"))
	for _, tc := range []struct {
		name     string
		policy   wasmv3.FailurePolicy
		failOpen bool
		network  bool
		allow    bool
	}{
		{"open", wasmv3.FailurePolicy_FAIL_OPEN, false, false, true},
		{"closed", wasmv3.FailurePolicy_FAIL_CLOSED, false, false, false},
		{"reload", wasmv3.FailurePolicy_FAIL_RELOAD, false, false, false},
		{"legacy-fail-open", wasmv3.FailurePolicy_UNSPECIFIED, true, false, true},
		{"unspecified", wasmv3.FailurePolicy_UNSPECIFIED, false, false, false},
		{"network-open", wasmv3.FailurePolicy_FAIL_OPEN, false, true, true},
		{"network-closed", wasmv3.FailurePolicy_FAIL_CLOSED, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := pluginConfig(srv.URL+"/m.wasm", wrong, tc.policy, nil)
			pc.FailOpen = tc.failOpen //nolint:staticcheck // the deprecated field older control planes send
			var filter proto.Message = &httpwasm.Wasm{Config: pc}
			if tc.network {
				filter = &netwasm.Wasm{Config: pc}
			}
			out, err := Converter{Fetcher: c}.Convert(t.Context(), []*anypb.Any{extensionConfig("ext", filter)})
			if err != nil {
				t.Fatalf("Convert: %v (a fetch failure is not a NACK)", err)
			}
			if tc.network {
				ec, r := decode(t, out[0], &netrbac.RBAC{})
				if ec.GetName() != "ext" || (r.GetRules() == nil) != tc.allow || r.GetRules().GetPolicies() != nil {
					t.Fatalf("fallback %v", r)
				}
				return
			}
			ec, r := decode(t, out[0], &httprbac.RBAC{})
			wantPrefix := "wasm-default-deny"
			if tc.allow {
				wantPrefix = "wasm-default-allow"
			}
			if ec.GetName() != "ext" || (r.GetRules() == nil) != tc.allow || r.GetRules().GetPolicies() != nil || r.GetRulesStatPrefix() != wantPrefix {
				t.Fatalf("fallback %v, want allow=%v", r, tc.allow)
			}
		})
	}
}

// TestConvertPassThrough: non-Wasm configs and local modules pass
// unchanged (a local one loses only the agent's variables); a TypedStruct
// Wasm filter is converted; undecodable resources and Wasm without code
// are errors (the response is NACKed).
func TestConvertPassThrough(t *testing.T) {
	m := module("ts")
	srv := newFileServer(t, m)
	c, _ := newCache(t, Options{})
	conv := Converter{Fetcher: c}

	rbac := extensionConfig("rbac", &httprbac.RBAC{})
	localPC := pluginConfig("", "", wasmv3.FailurePolicy_FAIL_CLOSED, nil)
	localPC.GetVmConfig().Code = &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{Local: &corev3.DataSource{
		Specifier: &corev3.DataSource_Filename{Filename: "/etc/istio/extensions/f.wasm"},
	}}}
	local := extensionConfig("local", &httpwasm.Wasm{Config: localPC})
	out, err := conv.Convert(t.Context(), []*anypb.Any{rbac, local})
	if err != nil || !proto.Equal(out[0], rbac) || !proto.Equal(out[1], local) {
		t.Fatalf("pass-through changed: %v", err)
	}

	localPC.GetVmConfig().EnvironmentVariables = &wasmv3.EnvironmentVariables{KeyValues: map[string]string{pullSecretEnv: "x"}}
	out, err = conv.Convert(t.Context(), []*anypb.Any{extensionConfig("local", &httpwasm.Wasm{Config: localPC})})
	if err != nil {
		t.Fatal(err)
	}
	if _, w := decode(t, out[0], &httpwasm.Wasm{}); w.GetConfig().GetVmConfig().GetEnvironmentVariables() != nil {
		t.Fatal("a local module kept the pull secret variable")
	}

	remote := &httpwasm.Wasm{Config: pluginConfig(srv.URL+"/m.wasm", "nil", wasmv3.FailurePolicy_FAIL_CLOSED, nil)}
	js, err := protojson.Marshal(remote)
	if err != nil {
		t.Fatal(err)
	}
	st := &structpb.Struct{}
	if err := protojson.Unmarshal(js, st); err != nil {
		t.Fatal(err)
	}
	ts := extensionConfig("ts", &xdstype.TypedStruct{TypeUrl: HTTPWasmType, Value: st})
	out, err = conv.Convert(t.Context(), []*anypb.Any{ts})
	if err != nil {
		t.Fatal(err)
	}
	if _, w := decode(t, out[0], &httpwasm.Wasm{}); !bytes.Equal(readFile(t, w.GetConfig().GetVmConfig().GetCode().GetLocal().GetFilename()), m) {
		t.Fatal("TypedStruct filter not converted")
	}

	noCode := pluginConfig("", "", wasmv3.FailurePolicy_FAIL_OPEN, nil)
	noCode.GetVmConfig().Code = nil
	for name, bad := range map[string]*anypb.Any{
		"garbage":   {TypeUrl: ExtensionConfigType, Value: []byte{0xff, 0xff}},
		"no-config": mustAny(&corev3.TypedExtensionConfig{Name: "x"}),
		"no-code":   extensionConfig("x", &httpwasm.Wasm{Config: noCode}),
	} {
		if _, err := conv.Convert(t.Context(), []*anypb.Any{rbac, bad}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestConvertEmptySecret: an empty pull secret variable fails the fetch
// (the failure policy applies), as in Istio.
func TestConvertEmptySecret(t *testing.T) {
	srv := newFileServer(t, module("x"))
	c, logs := newCache(t, Options{})
	out, err := Converter{Fetcher: c, Log: c.log}.Convert(t.Context(), []*anypb.Any{extensionConfig("e",
		&httpwasm.Wasm{Config: pluginConfig(srv.URL+"/m.wasm", "", wasmv3.FailurePolicy_FAIL_OPEN, map[string]string{pullSecretEnv: ""})})})
	if err != nil {
		t.Fatal(err)
	}
	if _, r := decode(t, out[0], &httprbac.RBAC{}); r.GetRules() != nil {
		t.Fatal("want allow-all")
	}
	if srv.requests.Load() != 0 || !strings.Contains(logs.String(), "empty image pull secret") {
		t.Fatalf("%d requests; log:\n%s", srv.requests.Load(), logs.String())
	}
}
