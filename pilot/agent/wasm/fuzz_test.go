package wasm

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpwasm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	netwasm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// pathFetcher is a Fetcher of a pure function: URLs containing "fail"
// fail, others resolve to a fixed local path.
type pathFetcher struct{}

func (pathFetcher) Get(_ context.Context, url string, _ GetOptions) (string, error) {
	if strings.Contains(url, "fail") {
		return "", errors.New("unreachable")
	}
	return "/var/lib/istio/data/m.wasm", nil
}

// FuzzConvert feeds arbitrary bytes as the value of an ECDS resource (as a
// control plane, or anything between it and the agent, could send) and
// checks what reaches Envoy: Convert never panics, and when it succeeds
// every Wasm filter it returns has local code and none of the agent's
// ISTIO_META_* variables (a pull secret never reaches Envoy).
func FuzzConvert(f *testing.F) {
	env := map[string]string{pullSecretEnv: `{"auths":{}}`, "USER": "kept"}
	for _, m := range []proto.Message{
		&corev3.TypedExtensionConfig{Name: "a", TypedConfig: mustAny(&httpwasm.Wasm{Config: pluginConfig("oci://r/m:1", "", wasmv3.FailurePolicy_FAIL_OPEN, env)})},
		&corev3.TypedExtensionConfig{Name: "b", TypedConfig: mustAny(&netwasm.Wasm{Config: pluginConfig("https://fail/m.wasm", "", wasmv3.FailurePolicy_FAIL_CLOSED, env)})},
		&corev3.TypedExtensionConfig{Name: "c", TypedConfig: mustAny(&httpwasm.Wasm{})},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		in := &anypb.Any{TypeUrl: "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig", Value: value}
		out, err := Converter{Fetcher: pathFetcher{}, Log: slog.New(slog.DiscardHandler)}.Convert(t.Context(), []*anypb.Any{in})
		if err != nil {
			return
		}
		if len(out) != 1 || out[0] == nil {
			t.Fatalf("Convert returned %v without an error", out)
		}
		ec := &corev3.TypedExtensionConfig{}
		if err := out[0].UnmarshalTo(ec); err != nil {
			t.Fatalf("output does not decode: %v", err)
		}
		wf, err := decodeWasm(ec)
		if err != nil || wf == nil {
			return // passed through unchanged, or an RBAC stand-in
		}
		vm := wf.config.GetVmConfig()
		if vm.GetCode().GetRemote() != nil {
			t.Fatalf("Wasm filter %q still has remote code", ec.GetName())
		}
		for k := range vm.GetEnvironmentVariables().GetKeyValues() {
			if strings.HasPrefix(k, istioMetaPrefix) {
				t.Fatalf("Wasm filter %q passes %s to Envoy", ec.GetName(), k)
			}
		}
	})
}
