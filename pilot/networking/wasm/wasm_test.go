package wasm_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	wasmhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	extensions "istio.io/api/extensions/v1alpha1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/wasm"
)

const rootNS = "istio-system"

// plugin returns a WasmPlugin config created at minute min (creation order
// breaks priority ties).
func plugin(name, ns string, min int, spec *extensions.WasmPlugin) model.Config {
	if spec.Url == "" {
		spec.Url = "oci://registry.example/" + name + ":1"
		spec.Sha256 = strings.Repeat("5a", 32)
	}
	return model.Config{Meta: model.Meta{Kind: model.KindWasmPlugin, Name: name, Namespace: ns, ResourceVersion: "7",
		CreationTimestamp: time.Date(2026, 1, 1, 0, min, 0, 0, time.UTC)}, Spec: spec}
}

func phase(ph extensions.PluginPhase, prio int32) *extensions.WasmPlugin {
	s := &extensions.WasmPlugin{Phase: ph}
	if prio != 0 {
		s.Priority = wrapperspb.Int32(prio)
	}
	return s
}

func resourceName(ns, name string) string { return model.WasmPluginResourcePrefix + ns + "." + name }

func pushWith(t *testing.T, configs ...model.Config) *model.PushContext {
	t.Helper()
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, configs...)
	return in.PushContext()
}

func sidecarListeners(t *testing.T, push *model.PushContext, proxy *model.Proxy) map[string]*listenerv3.Listener {
	t.Helper()
	ls, err := listener.Build(proxy, push, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return nt.ListenersByName(t, ls)
}

// inboundHTTP is virtualInbound's plaintext HTTP chain of port.
func inboundHTTP(t *testing.T, ls map[string]*listenerv3.Listener, port uint32) *hcmv3.HttpConnectionManager {
	t.Helper()
	for _, c := range ls["virtualInbound"].GetFilterChains() {
		if c.GetFilterChainMatch().GetDestinationPort().GetValue() == port && c.GetFilterChainMatch().GetTransportProtocol() != "tls" {
			if h := nt.ConnectionManager(t, c); h != nil {
				return h
			}
		}
	}
	t.Fatalf("no inbound HTTP chain on %d", port)
	return nil
}

// pluginNames keeps the WasmPlugin filters of names, in order.
func pluginNames(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, model.WasmPluginResourcePrefix) {
			out = append(out, strings.TrimPrefix(n, model.WasmPluginResourcePrefix))
		}
	}
	return out
}

// TestOrderByPhaseAndPriority: a workload's plugins run by phase (AUTHN,
// AUTHZ, STATS, unspecified), each phase by priority, highest first; ties
// keep the root namespace's first, then the oldest. AUTHN plugins come
// before jwt_authn, AUTHZ ones between it and the RBAC filters, the rest
// after them and before the router, as istiod places them. Every filter
// names its ECDS resource with the Wasm and RBAC types.
func TestOrderByPhaseAndPriority(t *testing.T) {
	configs := []model.Config{
		plugin("stats", "default", 1, phase(extensions.PluginPhase_STATS, 0)),
		plugin("authz-low", "default", 2, phase(extensions.PluginPhase_AUTHZ, 1)),
		plugin("authz-high", "default", 3, phase(extensions.PluginPhase_AUTHZ, 100)),
		plugin("last", "default", 4, phase(extensions.PluginPhase_UNSPECIFIED_PHASE, 0)),
		plugin("authn-new", "default", 6, phase(extensions.PluginPhase_AUTHN, 5)),
		plugin("authn-old", "default", 5, phase(extensions.PluginPhase_AUTHN, 5)),
		plugin("authn-root", rootNS, 9, phase(extensions.PluginPhase_AUTHN, 5)),
		{Meta: model.Meta{Kind: model.KindRequestAuthentication, Name: "jwt", Namespace: "default"}, Spec: &security.RequestAuthentication{
			JwtRules: []*security.JWTRule{{Issuer: "issuer.example", JwksUri: "https://issuer.example/jwks"}}}},
		{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "allow", Namespace: "default"}, Spec: &security.AuthorizationPolicy{
			Rules: []*security.Rule{{From: []*security.Rule_From{{Source: &security.Source{Namespaces: []string{"default"}}}}}}}},
	}
	push := pushWith(t, configs...)
	ls := sidecarListeners(t, push, nt.BookinfoProxy("reviews-v1"))
	in := nt.HTTPFilterNames(inboundHTTP(t, ls, 9080))
	wantIn := []string{"istio-system.authn-root", "default.authn-old", "default.authn-new", "default.authz-high", "default.authz-low", "default.stats", "default.last"}
	if got := pluginNames(in); !slices.Equal(got, wantIn) {
		t.Fatalf("inbound plugins %q, want %q (filters %q)", got, wantIn, in)
	}
	idx := func(name string) int { return slices.Index(in, name) }
	jwt, rbac, router := idx("envoy.filters.http.jwt_authn"), slices.IndexFunc(in, func(n string) bool {
		return strings.HasPrefix(n, wellknown.HTTPRoleBasedAccessControl)
	}), idx(wellknown.Router)
	if jwt < 0 || rbac < 0 {
		t.Fatalf("no jwt_authn or rbac filter: %q", in)
	}
	if !(idx(resourceName(rootNS, "authn-root")) > idx("istio.metadata_exchange") &&
		idx(resourceName("default", "authn-new")) < jwt && jwt < idx(resourceName("default", "authz-high")) &&
		idx(resourceName("default", "authz-low")) < rbac && rbac < idx(resourceName("default", "stats")) &&
		idx(resourceName("default", "last")) < router) {
		t.Errorf("plugins misplaced among the filters: %q", in)
	}
	// Outbound (no security filters): the same plugins in the same order.
	out := nt.HTTPFilterNames(nt.ConnectionManager(t, ls["0.0.0.0_9080"].GetFilterChains()[0]))
	if got := pluginNames(out); !slices.Equal(got, wantIn) {
		t.Errorf("outbound plugins %q, want %q", got, wantIn)
	}
	f := inboundHTTP(t, ls, 9080).GetHttpFilters()[idx(resourceName("default", "stats"))]
	cd := f.GetConfigDiscovery()
	if cd == nil || cd.GetConfigSource().GetAds() == nil || cd.GetConfigSource().GetInitialFetchTimeout().AsDuration() != 0 ||
		!slices.Equal(cd.GetTypeUrls(), []string{"type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm", "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"}) {
		t.Errorf("plugin filter %v", f)
	}
}

// TestSelection: a namespace's plugin reaches its namespace only; a
// selector only the workloads it selects; the root namespace's every
// namespace; and a proxy no plugin selects gets neither filters nor ECDS.
func TestSelection(t *testing.T) {
	sel := phase(extensions.PluginPhase_AUTHN, 0)
	sel.Selector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "ratings"}}
	push := pushWith(t, plugin("ns", "default", 1, phase(extensions.PluginPhase_STATS, 0)),
		plugin("sel", "default", 2, sel))
	other := nt.Proxy("10.244.9.9", "client", "other", map[string]string{"app": "ratings"})
	cases := []struct {
		proxy *model.Proxy
		want  []string
	}{
		{nt.BookinfoProxy("reviews-v1"), []string{"default.ns"}},
		{nt.BookinfoProxy("ratings-v1"), []string{"default.sel", "default.ns"}},
		{other, nil},
	}
	for _, c := range cases {
		ls := sidecarListeners(t, push, c.proxy)
		got := pluginNames(nt.HTTPFilterNames(nt.ConnectionManager(t, ls["0.0.0.0_9080"].GetFilterChains()[0])))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: plugins %q, want %q", c.proxy.ID, got, c.want)
		}
		res := ecds(t, c.proxy, push, resourceName("default", "ns"), resourceName("default", "sel"))
		var names []string
		for _, r := range res {
			names = append(names, strings.TrimPrefix(r.GetName(), model.WasmPluginResourcePrefix))
		}
		slices.Sort(names)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(names, want) {
			t.Errorf("%s: ECDS %q, want %q", c.proxy.ID, names, want)
		}
	}
	root := pushWith(t, plugin("mesh", rootNS, 1, phase(extensions.PluginPhase_STATS, 0)))
	ls := sidecarListeners(t, root, other)
	if got := pluginNames(nt.HTTPFilterNames(nt.ConnectionManager(t, ls["0.0.0.0_9080"].GetFilterChains()[0]))); !slices.Equal(got, []string{"istio-system.mesh"}) {
		t.Errorf("root namespace plugin on another namespace: %q", got)
	}
}

// TestMatch: match.mode SERVER reaches inbound chains only, CLIENT
// outbound ones, and ports narrow it to those ports; a NETWORK plugin
// goes before tcp_proxy (or the connection manager), not into HTTP filters.
func TestMatch(t *testing.T) {
	server := phase(extensions.PluginPhase_STATS, 0)
	server.Match = []*extensions.WasmPlugin_TrafficSelector{{Mode: typev1beta1.WorkloadMode_SERVER}}
	client9080 := phase(extensions.PluginPhase_STATS, 0)
	client9080.Match = []*extensions.WasmPlugin_TrafficSelector{{Mode: typev1beta1.WorkloadMode_CLIENT, Ports: []*typev1beta1.PortSelector{{Number: 9080}}}}
	other := phase(extensions.PluginPhase_STATS, 0)
	other.Match = []*extensions.WasmPlugin_TrafficSelector{{Ports: []*typev1beta1.PortSelector{{Number: 1234}}}}
	network := phase(extensions.PluginPhase_AUTHZ, 0)
	network.Type = extensions.PluginType_NETWORK
	push := pushWith(t, plugin("server", "default", 1, server), plugin("client9080", "default", 2, client9080),
		plugin("other", "default", 3, other), plugin("network", "default", 4, network))
	ls := sidecarListeners(t, push, nt.BookinfoProxy("reviews-v1"))
	if got := pluginNames(nt.HTTPFilterNames(inboundHTTP(t, ls, 9080))); !slices.Equal(got, []string{"default.server"}) {
		t.Errorf("inbound 9080 HTTP plugins %q, want the SERVER one", got)
	}
	outChain := ls["0.0.0.0_9080"].GetFilterChains()[0]
	if got := pluginNames(nt.HTTPFilterNames(nt.ConnectionManager(t, outChain))); !slices.Equal(got, []string{"default.client9080"}) {
		t.Errorf("outbound 9080 HTTP plugins %q, want the CLIENT 9080 one", got)
	}
	var netNames []string
	for _, f := range outChain.GetFilters() {
		netNames = append(netNames, f.GetName())
	}
	if !slices.Equal(pluginNames(netNames), []string{"default.network"}) || netNames[len(netNames)-1] != wellknown.HTTPConnectionManager {
		t.Errorf("outbound network filters %q: want the NETWORK plugin before the connection manager", netNames)
	}
	if f := outChain.GetFilters()[slices.Index(netNames, resourceName("default", "network"))]; !slices.Equal(f.GetConfigDiscovery().GetTypeUrls(),
		[]string{"type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm", "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC"}) {
		t.Errorf("network plugin filter %v", f)
	}
	if vo := ls["virtualOutbound"]; vo != nil {
		for _, fc := range vo.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if strings.HasPrefix(f.GetName(), model.WasmPluginResourcePrefix) {
					t.Errorf("virtualOutbound got plugin %s", f.GetName())
				}
			}
		}
	}
}

// TestGateway: a plugin selecting the ingress gateway's pods (by selector
// or targetRefs to its Gateway) is in its HTTP listeners; CLIENT mode
// applies to gateways.
func TestGateway(t *testing.T) {
	bySel := phase(extensions.PluginPhase_AUTHN, 0)
	bySel.Selector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"istio": "ingressgateway"}}
	bySel.Match = []*extensions.WasmPlugin_TrafficSelector{{Mode: typev1beta1.WorkloadMode_CLIENT}}
	byRef := phase(extensions.PluginPhase_STATS, 0)
	byRef.TargetRefs = []*typev1beta1.PolicyTargetReference{{Group: "gateway.networking.k8s.io", Kind: "Gateway", Name: "public"}}
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, nt.LoadConfigs(t, "bookinfo-networking/bookinfo-gateway.yaml", "default")...)
	in.Configs = append(in.Configs, plugin("sel", rootNS, 1, bySel), plugin("ref", rootNS, 2, byRef))
	push := in.PushContext()
	gw := &model.Proxy{ID: "router~10.244.1.1~ingress-0.istio-system~istio-system.svc.cluster.local", Type: model.Router,
		IPAddresses: []string{"10.244.1.1"}, Namespace: rootNS,
		Metadata: model.NodeMetadata{Namespace: rootNS, Labels: map[string]string{"istio": "ingressgateway", model.GatewayNameLabel: "public"}}}
	ls := gateway.BuildListeners(gw, push, slog.New(slog.DiscardHandler))
	if len(ls) == 0 {
		t.Fatal("gateway has no listener")
	}
	for _, l := range ls {
		nt.ValidateRecursively(t, l)
		for _, fc := range l.GetFilterChains() {
			if h := nt.ConnectionManager(t, fc); h != nil {
				if got := pluginNames(nt.HTTPFilterNames(h)); !slices.Equal(got, []string{"istio-system.sel", "istio-system.ref"}) {
					t.Errorf("%s: gateway plugins %q", l.GetName(), got)
				}
			}
		}
	}
}

func ecds(t *testing.T, proxy *model.Proxy, push *model.PushContext, names ...string) model.Resources {
	t.Helper()
	w := &model.WatchedResource{TypeURL: model.ExtensionConfigType, ResourceNames: map[string]struct{}{}}
	for _, n := range names {
		w.ResourceNames[n] = struct{}{}
	}
	res, err := wasm.Generator{}.Generate(proxy, push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func decodeECDS(t *testing.T, r model.Resources) map[string]*corev3.TypedExtensionConfig {
	t.Helper()
	out := map[string]*corev3.TypedExtensionConfig{}
	for _, res := range r {
		tec := &corev3.TypedExtensionConfig{}
		if err := res.GetResource().UnmarshalTo(tec); err != nil {
			t.Fatal(err)
		}
		nt.ValidateRecursively(t, tec)
		if tec.GetName() != res.GetName() {
			t.Errorf("resource %s holds %s", res.GetName(), tec.GetName())
		}
		out[tec.GetName()] = tec
	}
	return out
}

// TestExtensionConfig: the ECDS resource is istiod's: the Wasm filter with
// the plugin's name and root ID, its pluginConfig as JSON, the module as a
// remote URI the agent fetches (scheme-less URLs are OCI) with its sha256,
// or a local file; the agent's variables (pull policy, resource version)
// and the VM's env; failure_policy, or fail_open for proxies before 1.25;
// the network filter for NETWORK plugins.
func TestExtensionConfig(t *testing.T) {
	cfg, err := structpb.NewStruct(map[string]any{"header": "x-wasm", "limit": 3})
	if err != nil {
		t.Fatal(err)
	}
	http := &extensions.WasmPlugin{Url: "registry.example/ns/filter:1.0", Sha256: strings.Repeat("ab", 32),
		PluginName: "root", PluginConfig: cfg, ImagePullPolicy: extensions.PullPolicy_Always,
		FailStrategy: extensions.FailStrategy_FAIL_OPEN,
		VmConfig:     &extensions.VmConfig{Env: []*extensions.EnvVar{{Name: "A", Value: "1"}, {Name: "POD_NAME", ValueFrom: extensions.EnvValueSource_HOST}}}}
	file := &extensions.WasmPlugin{Url: "file:///opt/filters/f.wasm", Type: extensions.PluginType_NETWORK}
	push := pushWith(t, plugin("http", "default", 1, http), plugin("file", "default", 2, file))
	proxy := nt.BookinfoProxy("reviews-v1")
	got := decodeECDS(t, ecds(t, proxy, push, resourceName("default", "http"), resourceName("default", "file")))

	hw := &wasmhttpv3.Wasm{}
	if err := got[resourceName("default", "http")].GetTypedConfig().UnmarshalTo(hw); err != nil {
		t.Fatalf("http plugin: %v", err)
	}
	pc := hw.GetConfig()
	vm := pc.GetVmConfig()
	remote := vm.GetCode().GetRemote()
	conf := &wrapperspb.StringValue{}
	if err := pc.GetConfiguration().UnmarshalTo(conf); err != nil {
		t.Fatal(err)
	}
	switch {
	case pc.GetName() != "default.http" || pc.GetRootId() != "root":
		t.Errorf("name %q root %q", pc.GetName(), pc.GetRootId())
	case conf.GetValue() != `{"header":"x-wasm","limit":3}` && conf.GetValue() != `{"header":"x-wasm", "limit":3}`:
		t.Errorf("configuration %q", conf.GetValue())
	case vm.GetRuntime() != "envoy.wasm.runtime.v8":
		t.Errorf("runtime %q", vm.GetRuntime())
	case remote.GetHttpUri().GetUri() != "oci://registry.example/ns/filter:1.0" || remote.GetHttpUri().GetCluster() != "_" ||
		remote.GetSha256() != http.Sha256 || remote.GetHttpUri().GetTimeout().AsDuration() != 30*time.Second:
		t.Errorf("module %v", remote)
	case pc.GetFailurePolicy() != wasmv3.FailurePolicy_FAIL_OPEN:
		t.Errorf("failure policy %v", pc.GetFailurePolicy())
	}
	env := vm.GetEnvironmentVariables()
	wantEnv := map[string]string{"A": "1", "ISTIO_META_WASM_IMAGE_PULL_POLICY": "Always", "ISTIO_META_WASM_PLUGIN_RESOURCE_VERSION": "7"}
	if len(env.GetKeyValues()) != len(wantEnv) || !slices.Equal(env.GetHostEnvKeys(), []string{"POD_NAME"}) {
		t.Errorf("env %v", env)
	}
	for k, v := range wantEnv {
		if env.GetKeyValues()[k] != v {
			t.Errorf("env %s = %q, want %q", k, env.GetKeyValues()[k], v)
		}
	}

	nw := &wasmnetv3.Wasm{}
	if err := got[resourceName("default", "file")].GetTypedConfig().UnmarshalTo(nw); err != nil {
		t.Fatalf("network plugin: %v", err)
	}
	if fn := nw.GetConfig().GetVmConfig().GetCode().GetLocal().GetFilename(); fn != "/opt/filters/f.wasm" {
		t.Errorf("file module %q", fn)
	}
	if nw.GetConfig().GetFailurePolicy() != wasmv3.FailurePolicy_FAIL_CLOSED {
		t.Errorf("default failure policy %v, want FAIL_CLOSED", nw.GetConfig().GetFailurePolicy())
	}

	// Without a sha256 the remote module is served as istiod serves it (the
	// agent fetches it unchecked); everything else still validates.
	nosha := push2(t, &extensions.WasmPlugin{Url: "https://modules.example/f.wasm"})
	res := ecds(t, proxy, nosha, resourceName("default", "nosha"))
	if len(res) != 1 {
		t.Fatalf("plugin without sha256 not served: %v", res)
	}
	tec := &corev3.TypedExtensionConfig{}
	if err := res[0].GetResource().UnmarshalTo(tec); err != nil {
		t.Fatal(err)
	}
	if err := tec.GetTypedConfig().UnmarshalTo(hw); err != nil {
		t.Fatal(err)
	}
	if r := hw.GetConfig().GetVmConfig().GetCode().GetRemote(); r.GetHttpUri().GetUri() != "https://modules.example/f.wasm" || r.GetSha256() != "" {
		t.Errorf("module without sha256: %v", r)
	}

	old := nt.BookinfoProxy("reviews-v1")
	old.Metadata.IstioVersion = "1.24.2"
	if err := decodeECDS(t, ecds(t, old, push, resourceName("default", "http")))[resourceName("default", "http")].GetTypedConfig().UnmarshalTo(hw); err != nil {
		t.Fatal(err)
	}
	if !hw.GetConfig().GetFailOpen() || hw.GetConfig().GetFailurePolicy() != wasmv3.FailurePolicy_UNSPECIFIED { //nolint:staticcheck // what 1.24 reads
		t.Errorf("Istio 1.24 proxy: fail_open %v policy %v", hw.GetConfig().GetFailOpen(), hw.GetConfig().GetFailurePolicy()) //nolint:staticcheck
	}
}

func push2(t *testing.T, spec *extensions.WasmPlugin) *model.PushContext {
	t.Helper()
	return pushWith(t, model.Config{Meta: model.Meta{Kind: model.KindWasmPlugin, Name: "nosha", Namespace: "default"}, Spec: spec})
}

// secrets is a fixed SecretSnapshot.
type secrets map[string]*corev1.Secret

func (s secrets) Secret(ns, name string) *corev1.Secret { return s[ns+"/"+name] }

// TestPullSecret: the plugin's imagePullSecret (a dockerconfigjson Secret
// of its namespace) reaches a proxy whose identity the secure port
// verified in that namespace; an unauthenticated proxy, or one whose
// identity is of another namespace, gets the variable empty.
func TestPullSecret(t *testing.T) {
	const docker = `{"auths":{"registry.example":{"auth":"dXNlcjpwYXNz"}}}`
	spec := &extensions.WasmPlugin{ImagePullSecret: "pull"}
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, plugin("p", "default", 1, spec))
	env := in.Environment()
	env.Secrets = secretSource{secrets{"default/pull": {Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(docker)}}}}
	push := model.NewPushContext(env, nil, nil)
	secretOf := func(proxy *model.Proxy) string {
		t.Helper()
		tec := decodeECDS(t, ecds(t, proxy, push, resourceName("default", "p")))[resourceName("default", "p")]
		w := &wasmhttpv3.Wasm{}
		if err := tec.GetTypedConfig().UnmarshalTo(w); err != nil {
			t.Fatal(err)
		}
		v, ok := w.GetConfig().GetVmConfig().GetEnvironmentVariables().GetKeyValues()["ISTIO_META_WASM_IMAGE_PULL_SECRET"]
		if !ok {
			t.Fatal("no pull secret variable")
		}
		return v
	}
	anon := nt.BookinfoProxy("reviews-v1")
	if got := secretOf(anon); got != "" {
		t.Errorf("unauthenticated proxy got the pull secret")
	}
	authed := nt.BookinfoProxy("reviews-v1")
	authed.VerifiedIdentity = &model.VerifiedIdentity{Namespace: "default", ServiceAccount: "bookinfo-reviews"}
	if got := secretOf(authed); got != docker {
		t.Errorf("authenticated proxy got %q", got)
	}
	liar := nt.BookinfoProxy("reviews-v1")
	liar.VerifiedIdentity = &model.VerifiedIdentity{Namespace: "other", ServiceAccount: "x"}
	if got := secretOf(liar); got != "" {
		t.Errorf("identity of another namespace got the pull secret")
	}
}

type secretSource struct{ s secrets }

func (s secretSource) SecretSnapshot() model.SecretSnapshot { return s.s }

// TestEnvoyFilterExtensionConfig: an EXTENSION_CONFIG ADD patch is served
// over ECDS, by name, to the proxies its EnvoyFilter selects, and wins over
// a WasmPlugin of the same resource name; an invalid one is reported and
// not served.
func TestEnvoyFilterExtensionConfig(t *testing.T) {
	const lua = model.WasmPluginResourcePrefix + "default.same"
	ef := nt.EnvoyFilter(t, "default", "ecds", `
workloadSelector: {labels: {app: reviews}}
configPatches:
- applyTo: EXTENSION_CONFIG
  patch:
    operation: ADD
    value:
      name: my-lua
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
        default_source_code: {inline_string: "function envoy_on_request(h) end"}
- applyTo: EXTENSION_CONFIG
  patch:
    operation: ADD
    value:
      name: `+lua+`
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
        default_source_code: {inline_string: "function envoy_on_response(h) end"}
- applyTo: EXTENSION_CONFIG
  patch:
    operation: ADD
    value: {name: broken}
`)
	var logs strings.Builder
	gen := wasm.Generator{EnvoyFilters: envoyfilter.Reporter{Log: slog.New(slog.NewTextHandler(&logs, nil))}}
	push := pushWith(t, ef, plugin("same", "default", 1, phase(extensions.PluginPhase_STATS, 0)))
	get := func(proxy *model.Proxy, names ...string) map[string]*corev3.TypedExtensionConfig {
		w := &model.WatchedResource{TypeURL: model.ExtensionConfigType, ResourceNames: map[string]struct{}{}}
		for _, n := range names {
			w.ResourceNames[n] = struct{}{}
		}
		res, err := gen.Generate(proxy, push, w, nil)
		if err != nil {
			t.Fatal(err)
		}
		return decodeECDS(t, res)
	}
	got := get(nt.BookinfoProxy("reviews-v1"), "my-lua", lua, "broken")
	if len(got) != 2 || got["my-lua"] == nil || got["my-lua"].GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua" {
		t.Fatalf("selected proxy got %v", got)
	}
	if u := got[lua].GetTypedConfig().GetTypeUrl(); u != "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua" {
		t.Errorf("resource named by both an EnvoyFilter and a WasmPlugin: %s, want the EnvoyFilter's", u)
	}
	if !strings.Contains(logs.String(), "envoyfilter=default/ecds") || !strings.Contains(logs.String(), "spec.configPatches[2]") {
		t.Errorf("broken extension config not reported: %s", logs.String())
	}
	if got := get(nt.BookinfoProxy("ratings-v1"), "my-lua"); len(got) != 0 {
		t.Errorf("unselected proxy got %v", got)
	}
}
