package wasm

import (
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	wasmnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"

	extensions "istio.io/api/extensions/v1alpha1"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/internal/redact"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/credential"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
	"github.com/meshpilot/meshpilot/pilot/networking/resource"
)

// Environment variables of a plugin's VM that Istio's agent reads (and
// strips) when it fetches the module, as istiod sets them.
const (
	pullSecretEnv      = redact.WasmPullSecretEnv
	pullPolicyEnv      = "ISTIO_META_WASM_IMAGE_PULL_POLICY"
	resourceVersionEnv = "ISTIO_META_WASM_PLUGIN_RESOURCE_VERSION"
)

// v8 is the only runtime Istio's proxy ships.
const v8Runtime = "envoy.wasm.runtime.v8"

// fetchTimeout bounds a remote module's download, as istiod sets it; the
// agent does the fetching, so the cluster is a placeholder ("_").
const fetchTimeout = 30 * time.Second

// Generator serves ECDS: for each requested name, the extension config an
// EnvoyFilter EXTENSION_CONFIG ADD patch selecting the proxy creates under
// that name, else the TypedExtensionConfig of the WasmPlugin applying to the
// proxy (For) whose resource it is (istiod sends both when both exist; one
// response cannot hold two resources of a name, and the EnvoyFilter's comes
// first in istiod's); other names get nothing, so a proxy no plugin selects
// gets no plugin. Pull
// secrets (imagePullSecret, a kubernetes.io/dockerconfigjson Secret of
// the plugin's namespace) go only to proxies whose identity the secure
// port verified, and only into plugins of that identity's namespace or of
// the root namespace: istiod checks the first, not the second, which would
// let any authenticated workload claim another namespace's node metadata
// and read its registry credentials. Without it the variable is empty, as
// from istiod when the Secret cannot be read. The resources are built per
// request, not cached: a proxy has few, and only a WasmPlugin or Secret
// change (or a reconnect) asks for them again. Logger may be nil.
type Generator struct {
	Logger *slog.Logger
	// EnvoyFilters receives what happens to EXTENSION_CONFIG patches.
	EnvoyFilters envoyfilter.Reporter
}

var _ model.Generator = Generator{}

// Generate returns the requested extension configs that apply to proxy,
// sorted by name.
func (g Generator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if w == nil || w.Len() == 0 {
		return nil, nil
	}
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	applied := map[string]*model.WasmPlugin{}
	for _, p := range For(proxy, push) {
		applied[p.ResourceName] = p
	}
	fromFilters := map[string]*corev3.TypedExtensionConfig{}
	for _, ec := range envoyfilter.For(proxy, push, g.EnvoyFilters).ExtensionConfigs() {
		if _, dup := fromFilters[ec.GetName()]; !dup {
			fromFilters[ec.GetName()] = ec
		}
	}
	names := w.Names()
	sort.Strings(names)
	var out model.Resources
	for _, n := range names {
		if ec := fromFilters[n]; ec != nil {
			r, err := resource.Marshal(n, ec)
			if err != nil {
				return nil, fmt.Errorf("ecds for %s: %s: %w", clientlog.Truncate(proxy.ID, clientlog.MaxValue), n, err)
			}
			out = append(out, r)
			continue
		}
		p := applied[n]
		if p == nil {
			continue
		}
		secret, problem := pullSecret(proxy, push, p)
		if problem != "" {
			log.Warn("wasm pull secret not sent", clientlog.String("proxy", proxy.ID),
				"wasmplugin", p.Namespace+"/"+p.Name, "field", "spec.imagePullSecret", "reason", problem)
		}
		tec, err := Build(p, proxy, secret)
		if err != nil {
			log.Warn("wasmplugin not served", "wasmplugin", p.Namespace+"/"+p.Name, "error", err)
			continue
		}
		r, err := resource.Marshal(n, tec)
		if err != nil {
			return nil, fmt.Errorf("ecds for %s: %s: %w", clientlog.Truncate(proxy.ID, clientlog.MaxValue), n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Build returns the TypedExtensionConfig of plugin p for proxy, with
// pullSecret (a .dockerconfigjson, or "") for the agent when the plugin
// names one. The error names the field at fault.
func Build(p *model.WasmPlugin, proxy *model.Proxy, pullSecret string) (*corev3.TypedExtensionConfig, error) {
	spec := p.Spec
	code, err := moduleSource(spec)
	if err != nil {
		return nil, err
	}
	env := map[string]string{resourceVersionEnv: p.Version}
	if spec.GetImagePullSecret() != "" {
		env[pullSecretEnv] = pullSecret
	}
	if pol := spec.GetImagePullPolicy(); pol != extensions.PullPolicy_UNSPECIFIED_POLICY {
		env[pullPolicyEnv] = pol.String()
	}
	var hostKeys []string
	for _, e := range spec.GetVmConfig().GetEnv() {
		switch e.GetValueFrom() {
		case extensions.EnvValueSource_HOST:
			hostKeys = append(hostKeys, e.GetName())
		default: // INLINE
			env[e.GetName()] = e.GetValue()
		}
	}
	cfg := &wasmv3.PluginConfig{
		Name:   p.Namespace + "." + p.Name,
		RootId: spec.GetPluginName(),
		Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
			Runtime:              v8Runtime,
			Code:                 code,
			EnvironmentVariables: &wasmv3.EnvironmentVariables{KeyValues: env, HostEnvKeys: hostKeys},
		}},
	}
	if len(spec.GetPluginConfig().GetFields()) > 0 {
		js, err := protojson.Marshal(spec.GetPluginConfig())
		if err != nil {
			return nil, fmt.Errorf("spec.pluginConfig: %w", err)
		}
		if cfg.Configuration, err = anypb.New(wrapperspb.String(string(js))); err != nil {
			return nil, fmt.Errorf("spec.pluginConfig: %w", err)
		}
	}
	setFailurePolicy(cfg, spec.GetFailStrategy(), proxy)
	var filter proto.Message = &wasmhttpv3.Wasm{Config: cfg}
	if p.IsNetwork() {
		filter = &wasmnetv3.Wasm{Config: cfg}
	}
	if err := validate(filter, cfg); err != nil {
		return nil, fmt.Errorf("wasm filter: %w", err)
	}
	a, err := anypb.New(filter)
	if err != nil {
		return nil, fmt.Errorf("wasm filter: %w", err)
	}
	return &corev3.TypedExtensionConfig{Name: p.ResourceName, TypedConfig: a}, nil
}

// validate checks filter, whose config is cfg, with go-control-plane's
// ValidateAll, as Envoy will see it. The one field it may lack is a remote
// module's sha256, which Envoy requires of the modules it fetches itself
// but WasmPlugin makes optional and istiod sends empty: the resource goes
// to the agent, which fetches the module and hands Envoy a local file
// instead. Validation sees a placeholder there; the resource keeps it empty.
func validate(filter proto.Message, cfg *wasmv3.PluginConfig) error {
	remote := cfg.GetVmConfig().GetCode().GetRemote()
	if remote != nil && remote.GetSha256() == "" {
		remote.Sha256 = strings.Repeat("0", 64)
		defer func() { remote.Sha256 = "" }()
	}
	v, ok := filter.(interface{ ValidateAll() error })
	if !ok {
		return nil
	}
	return v.ValidateAll()
}

// moduleSource is where the module comes from: a local file for file://
// URLs, else a remote URI the agent fetches (oci:// when the URL has no
// scheme, as Istio reads "registry/image:tag").
func moduleSource(spec *extensions.WasmPlugin) (*corev3.AsyncDataSource, error) {
	raw := spec.GetUrl()
	if raw == "" {
		return nil, fmt.Errorf("spec.url: empty")
	}
	u, err := url.Parse(raw)
	if err != nil || !knownScheme(u.Scheme) {
		if u, err = url.Parse("oci://" + raw); err != nil {
			return nil, fmt.Errorf("spec.url %q: %w", clientlog.Truncate(raw, clientlog.MaxValue), err)
		}
	}
	if u.Scheme == "file" {
		return &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{Local: &corev3.DataSource{
			Specifier: &corev3.DataSource_Filename{Filename: strings.TrimPrefix(raw, "file://")},
		}}}, nil
	}
	return &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Remote{Remote: &corev3.RemoteDataSource{
		HttpUri: &corev3.HttpUri{
			Uri:              u.String(),
			HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: "_"},
			Timeout:          durationpb.New(fetchTimeout),
		},
		Sha256: spec.GetSha256(),
	}}}, nil
}

func knownScheme(s string) bool {
	return s == "oci" || s == "file" || s == "http" || s == "https"
}

// setFailurePolicy sets the plugin's failure policy; proxies older than
// Istio 1.25 know only the fail_open flag, as istiod serves them.
func setFailurePolicy(cfg *wasmv3.PluginConfig, s extensions.FailStrategy, proxy *model.Proxy) {
	if olderThan(proxy.Metadata.IstioVersion, 1, 25) {
		cfg.FailOpen = s == extensions.FailStrategy_FAIL_OPEN //nolint:staticcheck // what pre-1.25 proxies read
		return
	}
	switch s {
	case extensions.FailStrategy_FAIL_OPEN:
		cfg.FailurePolicy = wasmv3.FailurePolicy_FAIL_OPEN
	case extensions.FailStrategy_FAIL_RELOAD:
		cfg.FailurePolicy = wasmv3.FailurePolicy_FAIL_RELOAD
	default:
		cfg.FailurePolicy = wasmv3.FailurePolicy_FAIL_CLOSED
	}
}

// olderThan reports whether version ("1.24.3", "1.26-dev") is below
// major.minor; an unknown version is not.
func olderThan(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.SplitN(parts[1], "-", 2)[0])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma < major || (ma == major && mi < minor)
}

// pullSecret returns the .dockerconfigjson the plugin's imagePullSecret
// names for proxy, or "" and why not (empty when the plugin names none).
// The Secret is always read from the plugin's namespace, as istiod does.
func pullSecret(proxy *model.Proxy, push *model.PushContext, p *model.WasmPlugin) (string, string) {
	ref := p.Spec.GetImagePullSecret()
	if ref == "" {
		return "", ""
	}
	ref = strings.TrimPrefix(ref, credential.KubernetesPrefix)
	if i := strings.LastIndexByte(ref, '/'); i >= 0 {
		ref = ref[i+1:]
	}
	id := proxy.VerifiedIdentity
	switch {
	case id == nil:
		return "", "the connection is not authenticated (secure port 15012)"
	case id.Namespace != p.Namespace && p.Namespace != push.RootNamespace:
		return "", fmt.Sprintf("the proxy's identity is of namespace %q, not the plugin's", id.Namespace)
	}
	sec := push.Secrets().Secret(p.Namespace, ref)
	switch {
	case sec == nil:
		return "", fmt.Sprintf("secret %s/%s not found", p.Namespace, ref)
	case sec.Type != corev1.SecretTypeDockerConfigJson:
		return "", fmt.Sprintf("secret %s/%s is of type %q, not %s", p.Namespace, ref, sec.Type, corev1.SecretTypeDockerConfigJson)
	}
	return string(sec.Data[corev1.DockerConfigJsonKey]), ""
}
