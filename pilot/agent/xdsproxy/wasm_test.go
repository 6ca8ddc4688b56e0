package xdsproxy_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httprbac "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	httpwasm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	ggcrtypes "github.com/google/go-containerregistry/pkg/v1/types"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshpilot/meshpilot/pilot/agent/wasm"
	"github.com/meshpilot/meshpilot/pilot/agent/xdsproxy"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

const pluginName = "extensions.istio.io/wasmplugin/default.auth"

var wasmModule = []byte("\x00asm\x01\x00\x00\x00 meshpilot test module")

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// upstreamADS is a real ADS server (go-control-plane's, over a snapshot
// cache) on loopback standing in for the control plane's ECDS, which
// records every request it gets.
type upstreamADS struct {
	addr  string
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	sotw  []*discovery.DiscoveryRequest
	delta []*discovery.DeltaDiscoveryRequest
}

func startUpstreamADS(t *testing.T) *upstreamADS {
	t.Helper()
	u := &upstreamADS{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			u.mu.Lock()
			u.sotw = append(u.sotw, proto.CloneOf(r))
			u.mu.Unlock()
			return nil
		},
		StreamDeltaRequestFunc: func(_ int64, r *discovery.DeltaDiscoveryRequest) error {
			u.mu.Lock()
			u.delta = append(u.delta, proto.CloneOf(r))
			u.mu.Unlock()
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, serverv3.NewServer(ctx, u.cache, cb))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { cancel(); srv.Stop() })
	u.addr = lis.Addr().String()
	return u
}

// serve sets what node gets: the extension configs and clusters given.
func (u *upstreamADS) serve(t *testing.T, node, version string, ecds []*corev3.TypedExtensionConfig, clusters ...string) {
	t.Helper()
	res := map[resource.Type][]types.Resource{}
	for _, e := range ecds {
		res[resource.ExtensionConfigType] = append(res[resource.ExtensionConfigType], e)
	}
	for _, c := range clusters {
		res[resource.ClusterType] = append(res[resource.ClusterType], &clusterv3.Cluster{Name: c})
	}
	snap, err := cachev3.NewSnapshot(version, res)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// nacks are the ECDS requests with an error detail the upstream got.
func (u *upstreamADS) nacks() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, r := range u.sotw {
		if r.GetTypeUrl() == resource.ExtensionConfigType && r.GetErrorDetail() != nil {
			out = append(out, r.GetErrorDetail().GetMessage())
		}
	}
	for _, r := range u.delta {
		if r.GetTypeUrl() == resource.ExtensionConfigType && r.GetErrorDetail() != nil {
			out = append(out, r.GetErrorDetail().GetMessage())
		}
	}
	return out
}

// remotePlugin is the extension config istiod sends for a WasmPlugin with
// a remote URL.
func remotePlugin(url, sha string, policy wasmv3.FailurePolicy, env map[string]string) *corev3.TypedExtensionConfig {
	pc := &wasmv3.PluginConfig{
		Name: "default.auth", RootId: "auth", FailurePolicy: policy,
		Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
			Runtime: "envoy.wasm.runtime.v8",
			Code: &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Remote{Remote: &corev3.RemoteDataSource{
				HttpUri: &corev3.HttpUri{Uri: url, HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: "_"}, Timeout: durationpb.New(30 * time.Second)},
				Sha256:  sha,
			}}},
			EnvironmentVariables: &wasmv3.EnvironmentVariables{KeyValues: env},
		}},
	}
	tc, err := anypb.New(&httpwasm.Wasm{Config: pc})
	if err != nil {
		panic(err)
	}
	return &corev3.TypedExtensionConfig{Name: pluginName, TypedConfig: tc}
}

// adsStream is a raw downstream ADS client on the proxy's socket: it
// subscribes and ACKs like Envoy, and hands each response to the test.
type adsStream struct {
	node  *corev3.Node
	delta bool
	sotwS grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	delS  grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	got   chan proto.Message
}

func openStream(t *testing.T, socket, nodeID string, delta bool) *adsStream {
	t.Helper()
	conn := bootstraptest.Dial(t, "unix://"+socket)
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	s := &adsStream{node: &corev3.Node{Id: nodeID}, delta: delta, got: make(chan proto.Message, 16)}
	var err error
	if delta {
		s.delS, err = ads.DeltaAggregatedResources(t.Context())
	} else {
		s.sotwS, err = ads.StreamAggregatedResources(t.Context())
	}
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			var m proto.Message
			var err error
			if delta {
				m, err = s.delS.Recv()
			} else {
				m, err = s.sotwS.Recv()
			}
			if err != nil {
				close(s.got)
				return
			}
			s.got <- m
		}
	}()
	return s
}

// subscribe asks for names of typ (the first request carries the node).
func (s *adsStream) subscribe(t *testing.T, typ string, names ...string) {
	t.Helper()
	var err error
	if s.delta {
		err = s.delS.Send(&discovery.DeltaDiscoveryRequest{Node: s.node, TypeUrl: typ, ResourceNamesSubscribe: names})
	} else {
		err = s.sotwS.Send(&discovery.DiscoveryRequest{Node: s.node, TypeUrl: typ, ResourceNames: names})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// next returns the next response's type and resources, ACKing it.
func (s *adsStream) next(t *testing.T) (string, map[string]*anypb.Any) {
	t.Helper()
	var m proto.Message
	select {
	case m = <-s.got:
	case <-time.After(30 * time.Second):
		t.Fatal("no response in 30 s")
	}
	if m == nil {
		t.Fatal("the stream ended")
	}
	out := map[string]*anypb.Any{}
	switch r := m.(type) {
	case *discovery.DiscoveryResponse:
		for _, a := range r.GetResources() {
			ec := &corev3.TypedExtensionConfig{}
			if a.UnmarshalTo(ec) == nil {
				out[ec.GetName()] = a
			} else {
				out[a.GetTypeUrl()] = a
			}
		}
		_ = s.sotwS.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		return r.GetTypeUrl(), out
	case *discovery.DeltaDiscoveryResponse:
		for _, res := range r.GetResources() {
			out[res.GetName()] = res.GetResource()
		}
		_ = s.delS.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
		return r.GetTypeUrl(), out
	}
	t.Fatalf("unexpected message %T", m)
	return "", nil
}

// nextECDS returns the next response, which must be ECDS, decoded.
func (s *adsStream) nextECDS(t *testing.T) *corev3.TypedExtensionConfig {
	t.Helper()
	typ, res := s.next(t)
	if typ != resource.ExtensionConfigType || res[pluginName] == nil {
		t.Fatalf("got %s %v, want ECDS with %s", typ, res, pluginName)
	}
	ec := &corev3.TypedExtensionConfig{}
	if err := res[pluginName].UnmarshalTo(ec); err != nil {
		t.Fatal(err)
	}
	return ec
}

func newWasmCache(t *testing.T, log *slog.Logger) *wasm.Cache {
	t.Helper()
	c, err := wasm.New(wasm.Options{Dir: t.TempDir(), HTTPRequestMaxRetries: 1, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestWasmRemoteHTTP: an ECDS response whose Wasm filter loads an HTTP
// module reaches the client with the module as a local file (right bytes
// and sha256) and without the agent's variables; the pull secret is in no
// log line.
func TestWasmRemoteHTTP(t *testing.T) {
	const secret = `{"auths":{"registry.example.com":{"auth":"c2VjcmV0LXVzZXI6c2VjcmV0LXBhc3M="}}}`
	mod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(wasmModule) }))
	t.Cleanup(mod.Close)
	up := startUpstreamADS(t)
	logs := &bootstraptest.LogBuffer{}
	log := bootstraptest.Logger(t, slog.LevelDebug, logs)
	p := startProxy(t, xdsproxy.Options{Upstream: up.addr, Wasm: newWasmCache(t, log), Log: log})

	for _, delta := range []bool{false, true} {
		t.Run(protocolName(delta), func(t *testing.T) {
			node := "sidecar~10.0.0.1~a." + protocolName(delta) + "~default.svc.cluster.local"
			env := map[string]string{
				"ISTIO_META_WASM_IMAGE_PULL_SECRET": secret, "ISTIO_META_WASM_IMAGE_PULL_POLICY": "IfNotPresent",
				"ISTIO_META_WASM_PLUGIN_RESOURCE_VERSION": "42", "LOG_LEVEL": "debug",
			}
			up.serve(t, node, "1", []*corev3.TypedExtensionConfig{remotePlugin(mod.URL+"/auth.wasm", hexSHA(wasmModule), wasmv3.FailurePolicy_FAIL_CLOSED, env)})
			s := openStream(t, p.socket, node, delta)
			s.subscribe(t, resource.ExtensionConfigType, pluginName)
			ec := s.nextECDS(t)
			w := &httpwasm.Wasm{}
			if err := ec.GetTypedConfig().UnmarshalTo(w); err != nil {
				t.Fatalf("typed_config %s: %v", ec.GetTypedConfig().GetTypeUrl(), err)
			}
			vm := w.GetConfig().GetVmConfig()
			file := vm.GetCode().GetLocal().GetFilename()
			got, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("code %v: %v", vm.GetCode(), err)
			}
			if !bytes.Equal(got, wasmModule) || hexSHA(got) != hexSHA(wasmModule) {
				t.Fatalf("local module %q differs", got)
			}
			if kv := vm.GetEnvironmentVariables().GetKeyValues(); len(kv) != 1 || kv["LOG_LEVEL"] != "debug" {
				t.Fatalf("environment %v, want only LOG_LEVEL", kv)
			}
		})
	}
	for _, leak := range []string{secret, "c2VjcmV0LXVzZXI6c2VjcmV0LXBhc3M=", "secret-pass"} {
		if strings.Contains(logs.String(), leak) {
			t.Fatalf("the log holds the pull secret (%q)", leak)
		}
	}
	if n := up.nacks(); len(n) != 0 {
		t.Fatalf("NACKs upstream: %v", n)
	}
}

// TestWasmFetchFailure: a module with the wrong sha256 (fail-closed) or
// on an unreachable server (fail-open) reaches the client as Istio's RBAC
// substitute, deny-all or allow-all, under the plugin's name; a Wasm
// filter without code is NACKed upstream and never reaches the client,
// while other types still do.
func TestWasmFetchFailure(t *testing.T) {
	mod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(wasmModule) }))
	t.Cleanup(mod.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + lis.Addr().String() + "/gone.wasm"
	lis.Close()
	up := startUpstreamADS(t)
	log := bootstraptest.Logger(t, slog.LevelInfo, nil)
	p := startProxy(t, xdsproxy.Options{Upstream: up.addr, Wasm: newWasmCache(t, log), Log: log})

	for _, delta := range []bool{false, true} {
		t.Run(protocolName(delta), func(t *testing.T) {
			for _, tc := range []struct {
				name, url, sha string
				policy         wasmv3.FailurePolicy
				allow          bool
			}{
				{"sha-mismatch-closed", mod.URL + "/auth.wasm", hexSHA([]byte("other")), wasmv3.FailurePolicy_FAIL_CLOSED, false},
				{"unreachable-open", dead, "", wasmv3.FailurePolicy_FAIL_OPEN, true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					node := "sidecar~10.0.0.2~" + tc.name + "." + protocolName(delta) + "~default.svc.cluster.local"
					up.serve(t, node, "1", []*corev3.TypedExtensionConfig{remotePlugin(tc.url, tc.sha, tc.policy, nil)})
					s := openStream(t, p.socket, node, delta)
					s.subscribe(t, resource.ExtensionConfigType, pluginName)
					ec := s.nextECDS(t)
					r := &httprbac.RBAC{}
					if err := ec.GetTypedConfig().UnmarshalTo(r); err != nil {
						t.Fatalf("typed_config %s, want RBAC: %v", ec.GetTypedConfig().GetTypeUrl(), err)
					}
					if (r.GetRules() == nil) != tc.allow || len(r.GetRules().GetPolicies()) != 0 {
						t.Fatalf("RBAC %v, want allow-all=%v", r, tc.allow)
					}
				})
			}

			t.Run("nack", func(t *testing.T) {
				node := "sidecar~10.0.0.3~nack." + protocolName(delta) + "~default.svc.cluster.local"
				bad := remotePlugin(mod.URL, "", wasmv3.FailurePolicy_FAIL_OPEN, nil)
				w := &httpwasm.Wasm{}
				_ = bad.GetTypedConfig().UnmarshalTo(w)
				w.GetConfig().GetVmConfig().Code = nil
				bad.TypedConfig, _ = anypb.New(w)
				before := len(up.nacks())
				up.serve(t, node, "1", []*corev3.TypedExtensionConfig{bad}, "outbound|80||a.default.svc.cluster.local")
				s := openStream(t, p.socket, node, delta)
				s.subscribe(t, resource.ExtensionConfigType, pluginName)
				waitFor(t, "the NACK upstream", func() bool { return len(up.nacks()) > before })
				if msg := up.nacks()[before]; !strings.Contains(msg, "without remote or local code") {
					t.Fatalf("NACK %q", msg)
				}
				s.subscribe(t, resource.ClusterType)
				if typ, _ := s.next(t); typ != resource.ClusterType {
					t.Fatalf("first response %s, want CDS (the NACKed ECDS must not reach the client)", typ)
				}
			})
		})
	}
}

// TestWasmDoesNotBlockOtherTypes: while a module download is stuck, other
// types' responses reach the client; the ECDS response follows once the
// module arrives.
func TestWasmDoesNotBlockOtherTypes(t *testing.T) {
	// One module per protocol, each held until its subtest releases it.
	release := map[string]chan struct{}{"/sotw.wasm": make(chan struct{}), "/delta.wasm": make(chan struct{})}
	mod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release[r.URL.Path]:
			_, _ = w.Write(wasmModule)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(mod.Close)
	up := startUpstreamADS(t)
	log := bootstraptest.Logger(t, slog.LevelInfo, nil)
	p := startProxy(t, xdsproxy.Options{Upstream: up.addr, Wasm: newWasmCache(t, log), Log: log})
	for _, delta := range []bool{false, true} {
		t.Run(protocolName(delta), func(t *testing.T) {
			node := "sidecar~10.0.0.4~slow." + protocolName(delta) + "~default.svc.cluster.local"
			up.serve(t, node, "1", []*corev3.TypedExtensionConfig{
				remotePlugin(mod.URL+"/"+protocolName(delta)+".wasm", "", wasmv3.FailurePolicy_FAIL_CLOSED, nil),
			}, "outbound|80||a.default.svc.cluster.local")
			s := openStream(t, p.socket, node, delta)
			s.subscribe(t, resource.ExtensionConfigType, pluginName)
			s.subscribe(t, resource.ClusterType)
			if typ, _ := s.next(t); typ != resource.ClusterType {
				t.Fatalf("first response %s, want CDS while the module is stuck", typ)
			}
			close(release["/"+protocolName(delta)+".wasm"])
			ec := s.nextECDS(t)
			if ec.GetTypedConfig().GetTypeUrl() != wasm.HTTPWasmType {
				t.Fatalf("ECDS %s", ec.GetTypedConfig().GetTypeUrl())
			}
		})
	}
}

// TestWasmOCIPullSecret: an OCI module behind basic auth is pulled with the
// pull secret's credentials (the registry sees them), reaches the client
// as a local file, and neither the secret nor the password is logged.
func TestWasmOCIPullSecret(t *testing.T) {
	const user, pass = "wasm-puller", "Pa55-w0rd-never-logged"
	var mu sync.Mutex
	var seen []string
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, pw, ok := r.BasicAuth()
		if !ok || u != user || pw != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, ggcrtypes.OCIManifestSchema1), static.NewLayer(wasmModule, wasm.WasmLayerMediaType))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host + "/wasm/auth:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: user, Password: pass})); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	seen = nil
	mu.Unlock()

	up := startUpstreamADS(t)
	logs := &bootstraptest.LogBuffer{}
	lg := bootstraptest.Logger(t, slog.LevelDebug, logs)
	p := startProxy(t, xdsproxy.Options{Upstream: up.addr, Wasm: newWasmCache(t, lg), Log: lg})
	secret := `{"auths":{"` + host + `":{"username":"` + user + `","password":"` + pass + `"}}}`
	node := "sidecar~10.0.0.5~oci.default~default.svc.cluster.local"
	up.serve(t, node, "1", []*corev3.TypedExtensionConfig{remotePlugin("oci://"+host+"/wasm/auth:v1", "", wasmv3.FailurePolicy_FAIL_CLOSED,
		map[string]string{"ISTIO_META_WASM_IMAGE_PULL_SECRET": secret})})
	s := openStream(t, p.socket, node, true)
	s.subscribe(t, resource.ExtensionConfigType, pluginName)
	ec := s.nextECDS(t)
	w := &httpwasm.Wasm{}
	if err := ec.GetTypedConfig().UnmarshalTo(w); err != nil {
		t.Fatalf("typed_config %s: %v", ec.GetTypedConfig().GetTypeUrl(), err)
	}
	got, err := os.ReadFile(w.GetConfig().GetVmConfig().GetCode().GetLocal().GetFilename())
	if err != nil || !bytes.Equal(got, wasmModule) {
		t.Fatalf("local module: %q %v", got, err)
	}
	if w.GetConfig().GetVmConfig().GetEnvironmentVariables() != nil {
		t.Fatal("the pull secret variable reached the client")
	}
	mu.Lock()
	pulled := strings.Join(seen, ",")
	mu.Unlock()
	if !strings.Contains(pulled, "/manifests/v1") || !strings.Contains(pulled, "/blobs/") {
		t.Fatalf("authenticated registry requests: %s", pulled)
	}
	for _, leak := range []string{pass, secret} {
		if strings.Contains(logs.String(), leak) {
			t.Fatalf("the log holds %q", leak)
		}
	}
}
