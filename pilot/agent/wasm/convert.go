package wasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	xdstype "github.com/cncf/xds/go/udpa/type/v1"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	httprbac "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	httpwasm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	netrbac "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	netwasm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Type URLs of the resources the converter reads and writes.
const (
	ExtensionConfigType    = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
	HTTPWasmType           = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	NetworkWasmType        = "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm"
	typedStructType        = "type.googleapis.com/udpa.type.v1.TypedStruct"
	xdsTypedStructType     = "type.googleapis.com/xds.type.v3.TypedStruct"
	istioMetaPrefix        = "ISTIO_META_"
	pullSecretEnv          = "ISTIO_META_WASM_IMAGE_PULL_SECRET"
	pullPolicyEnv          = "ISTIO_META_WASM_IMAGE_PULL_POLICY"
	resourceVersionEnv     = "ISTIO_META_WASM_PLUGIN_RESOURCE_VERSION"
	allowStatPrefix        = "wasm-default-allow"
	denyStatPrefix         = "wasm-default-deny"
	nilChecksumPlaceholder = "nil"
)

// Fetcher returns the local path of a remote module; *Cache is one.
type Fetcher interface {
	Get(ctx context.Context, url string, o GetOptions) (string, error)
}

// Converter rewrites the extension configs of an ECDS response for Envoy,
// as Istio's agent does (pkg/wasm/convert.go):
//
//   - a Wasm filter (HTTP or network, typed or in a TypedStruct) whose
//     code is remote is fetched through the Fetcher and gets a local
//     filename instead; the ISTIO_META_* variables the control plane put in
//     the VM's environment (pull secret, policy, resource version) are
//     removed;
//   - when the fetch fails, the filter becomes an RBAC filter of the same
//     name: allow-all (stat prefix wasm-default-allow) when the plugin's
//     failure policy is FAIL_OPEN (or the older fail_open is set), else
//     deny-all (wasm-default-deny), which is what Istio does for
//     FAIL_CLOSED and FAIL_RELOAD alike;
//   - anything else passes unchanged.
//
// Convert fails, and the response is to be NACKed, only for a resource
// that does not decode or a Wasm filter with neither remote nor local code.
type Converter struct {
	Fetcher Fetcher
	// Log gets a line per substituted filter; nil is slog.Default().
	Log *slog.Logger
}

// Convert returns the converted resources of one response, in order,
// fetching concurrently; it never modifies resources.
func (c Converter) Convert(ctx context.Context, resources []*anypb.Any) ([]*anypb.Any, error) {
	out := make([]*anypb.Any, len(resources))
	errs := make([]error, len(resources))
	var wg sync.WaitGroup
	for i, r := range resources {
		wg.Go(func() { out[i], errs[i] = c.convertOne(ctx, r) })
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// wasmFilter is a decoded HTTP or network Wasm filter.
type wasmFilter struct {
	msg     proto.Message // *httpwasm.Wasm or *netwasm.Wasm
	config  *wasmv3.PluginConfig
	network bool
}

func (c Converter) convertOne(ctx context.Context, r *anypb.Any) (*anypb.Any, error) {
	ec := &corev3.TypedExtensionConfig{}
	if err := r.UnmarshalTo(ec); err != nil {
		return nil, fmt.Errorf("extension config: %w", err)
	}
	f, err := decodeWasm(ec)
	if err != nil {
		return nil, fmt.Errorf("extension config %s: %w", ec.GetName(), err)
	}
	if f == nil {
		return r, nil // not Wasm
	}
	vm := f.config.GetVmConfig()
	code := vm.GetCode()
	if code.GetRemote() == nil {
		if code.GetLocal() == nil {
			return nil, fmt.Errorf("extension config %s: Wasm filter without remote or local code", ec.GetName())
		}
		// Istio passes a local module unchanged. We also drop the agent's
		// variables, so a pull secret never reaches Envoy.
		if !stripAgentEnv(vm) {
			return r, nil
		}
		return wrap(ec, f)
	}
	path, err := c.fetch(ctx, ec.GetName(), f.config)
	if err != nil {
		failOpen := isFailOpen(f.config)
		c.log().Warn("Wasm module not available; the filter is replaced by an RBAC filter",
			"resource", ec.GetName(), "rbac", map[bool]string{true: "allow-all", false: "deny-all"}[failOpen], "error", err)
		return fallback(ec.GetName(), f.network, failOpen)
	}
	vm.Code = &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{
		Local: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}},
	}}
	return wrap(ec, f)
}

// fetch reads the agent's variables, strips them from the VM's
// environment, and fetches the remote module.
func (c Converter) fetch(ctx context.Context, resource string, cfg *wasmv3.PluginConfig) (string, error) {
	vm := cfg.GetVmConfig()
	env := vm.GetEnvironmentVariables().GetKeyValues()
	o := GetOptions{
		ResourceName:    resource,
		ResourceVersion: env[resourceVersionEnv],
		PullPolicy:      ParsePullPolicy(env[pullPolicyEnv]),
	}
	if secret, ok := env[pullSecretEnv]; ok {
		if secret == "" {
			stripAgentEnv(vm)
			return "", fmt.Errorf("plugin %s: empty image pull secret", cfg.GetName())
		}
		o.PullSecret = []byte(secret)
	}
	stripAgentEnv(vm)
	remote := vm.GetCode().GetRemote()
	uri := remote.GetHttpUri()
	if uri == nil {
		return "", fmt.Errorf("plugin %s: remote code without http_uri", cfg.GetName())
	}
	o.Checksum = remote.GetSha256()
	if o.Checksum == nilChecksumPlaceholder { // istiod's stand-in for "not set"
		o.Checksum = ""
	}
	o.Timeout = DefaultFetchTimeout
	if uri.GetTimeout() != nil {
		o.Timeout = uri.GetTimeout().AsDuration()
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultFetchTimeout
	}
	return c.Fetcher.Get(ctx, uri.GetUri(), o)
}

func (c Converter) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

// decodeWasm returns the Wasm filter ec holds (a private copy), or nil
// when ec is not a Wasm filter.
func decodeWasm(ec *corev3.TypedExtensionConfig) (*wasmFilter, error) {
	tc := ec.GetTypedConfig()
	if tc == nil {
		return nil, errors.New("no typed_config")
	}
	typeURL, raw, fromStruct := tc.GetTypeUrl(), tc, false
	var structValue []byte
	switch typeURL {
	case typedStructType, xdsTypedStructType:
		ts := &xdstype.TypedStruct{}
		if err := proto.Unmarshal(tc.GetValue(), ts); err != nil {
			return nil, fmt.Errorf("typed struct: %w", err)
		}
		b, err := protojson.Marshal(ts.GetValue())
		if err != nil {
			return nil, fmt.Errorf("typed struct: %w", err)
		}
		typeURL, structValue, fromStruct = ts.GetTypeUrl(), b, true
	}
	var f wasmFilter
	switch typeURL {
	case HTTPWasmType:
		f.msg = &httpwasm.Wasm{}
	case NetworkWasmType:
		f.msg, f.network = &netwasm.Wasm{}, true
	default:
		return nil, nil
	}
	var err error
	if fromStruct {
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(structValue, f.msg)
	} else {
		err = raw.UnmarshalTo(f.msg)
	}
	if err != nil {
		return nil, fmt.Errorf("Wasm filter: %w", err)
	}
	if f.network {
		f.config = f.msg.(*netwasm.Wasm).GetConfig()
	} else {
		f.config = f.msg.(*httpwasm.Wasm).GetConfig()
	}
	return &f, nil
}

// wrap re-encodes the filter (always typed, as Istio does) into a copy of ec.
func wrap(ec *corev3.TypedExtensionConfig, f *wasmFilter) (*anypb.Any, error) {
	tc, err := anypb.New(f.msg)
	if err != nil {
		return nil, fmt.Errorf("extension config %s: %w", ec.GetName(), err)
	}
	out, err := anypb.New(&corev3.TypedExtensionConfig{Name: ec.GetName(), TypedConfig: tc})
	if err != nil {
		return nil, fmt.Errorf("extension config %s: %w", ec.GetName(), err)
	}
	return out, nil
}

// stripAgentEnv removes ISTIO_META_* from the VM's key_values (dropping
// an environment left empty) and reports whether it removed any.
func stripAgentEnv(vm *wasmv3.VmConfig) bool {
	env := vm.GetEnvironmentVariables()
	removed := false
	for k := range env.GetKeyValues() {
		if strings.HasPrefix(k, istioMetaPrefix) {
			delete(env.KeyValues, k)
			removed = true
		}
	}
	if removed && len(env.GetKeyValues()) == 0 {
		if len(env.GetHostEnvKeys()) == 0 {
			vm.EnvironmentVariables = nil
		} else {
			env.KeyValues = nil
		}
	}
	return removed
}

// isFailOpen is the plugin's failure_policy, or the older fail_open when
// the policy is unspecified.
func isFailOpen(cfg *wasmv3.PluginConfig) bool {
	if p := cfg.GetFailurePolicy(); p != wasmv3.FailurePolicy_UNSPECIFIED {
		return p == wasmv3.FailurePolicy_FAIL_OPEN
	}
	return cfg.GetFailOpen() //nolint:staticcheck // deprecated, still sent by older control planes
}

// fallback is Istio's stand-in for a module that could not be fetched: an
// RBAC filter named as the Wasm filter, without rules (allow all) or with
// an empty ALLOW policy set (deny all).
func fallback(name string, network, failOpen bool) (*anypb.Any, error) {
	var rules *rbacv3.RBAC
	prefix := allowStatPrefix
	if !failOpen {
		rules, prefix = &rbacv3.RBAC{}, denyStatPrefix
	}
	var m proto.Message = &httprbac.RBAC{Rules: rules, RulesStatPrefix: prefix}
	if network {
		m = &netrbac.RBAC{Rules: rules, StatPrefix: prefix}
	}
	tc, err := anypb.New(m)
	if err != nil {
		return nil, fmt.Errorf("extension config %s: fallback filter: %w", name, err)
	}
	out, err := anypb.New(&corev3.TypedExtensionConfig{Name: name, TypedConfig: tc})
	if err != nil {
		return nil, fmt.Errorf("extension config %s: fallback filter: %w", name, err)
	}
	return out, nil
}
