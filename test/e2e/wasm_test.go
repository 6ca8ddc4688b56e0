package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	wasmhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

const wasmPluginYAML = `apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata:
  name: auth
  namespace: default
spec:
  selector:
    matchLabels:
      app: reviews
  url: oci://registry.example/auth:VERSION
  phase: AUTHN
  pluginConfig:
    header: x-auth
`

const wasmResource = model.WasmPluginResourcePrefix + "default.auth"

// pluginFilters returns, per listener, the WasmPlugin filters of its HTTP
// connection managers.
func pluginFilters(t *testing.T, resp *discovery.DiscoveryResponse) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, a := range resp.GetResources() {
		l := &listenerv3.Listener{}
		if err := a.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		for _, fc := range l.GetFilterChains() {
			for _, hf := range nt.ConnectionManager(t, fc).GetHttpFilters() {
				if strings.HasPrefix(hf.GetName(), model.WasmPluginResourcePrefix) && hf.GetConfigDiscovery() != nil {
					out[l.GetName()] = append(out[l.GetName()], hf.GetName())
				}
			}
		}
	}
	return out
}

// recvType reads responses until one of typeURL arrives, ACKing the others.
func recvType(t *testing.T, s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, typeURL string) *discovery.DiscoveryResponse {
	t.Helper()
	for {
		resp, err := s.Recv()
		if err != nil {
			t.Fatalf("waiting for %s: %v", typeURL, err)
		}
		if resp.GetTypeUrl() == typeURL {
			return resp
		}
		if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
}

// moduleURL decodes the one ECDS resource of resp and returns its module URL.
func moduleURL(t *testing.T, resp *discovery.DiscoveryResponse) string {
	t.Helper()
	if len(resp.GetResources()) != 1 {
		t.Fatalf("ECDS response with %d resources", len(resp.GetResources()))
	}
	tec := &corev3.TypedExtensionConfig{}
	if err := resp.GetResources()[0].UnmarshalTo(tec); err != nil {
		t.Fatal(err)
	}
	w := &wasmhttpv3.Wasm{}
	if err := tec.GetTypedConfig().UnmarshalTo(w); err != nil || tec.GetName() != wasmResource {
		t.Fatalf("ECDS resource %s: %v", tec.GetName(), err)
	}
	return w.GetConfig().GetVmConfig().GetCode().GetRemote().GetHttpUri().GetUri()
}

// TestWasmPluginOverADS: from a directory of YAML, a WasmPlugin selecting
// reviews puts its filter into reviews' listeners and none into
// productpage's; reviews gets the plugin over ECDS on its ADS stream (SotW
// and Delta), and a change to the file pushes the new module URL.
func TestWasmPluginOverADS(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo"), dir)
	pluginFile := filepath.Join(dir, "wasmplugin.yaml")
	writeFile(t, pluginFile, strings.ReplaceAll(wasmPluginYAML, "VERSION", "1"))
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	srv := bootstraptest.Start(t, opts)
	conn := bootstraptest.Dial(t, srv.GRPCListenAddr())
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	lds := func(pod, app, ip string) map[string][]string {
		s, err := ads.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.CloseSend() }()
		node := bootstraptest.SidecarNode(t, pod, "default", ip, map[string]string{"app": app})
		if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: model.ListenerType}); err != nil {
			t.Fatal(err)
		}
		return pluginFilters(t, recvType(t, s, model.ListenerType))
	}
	if got := lds("productpage-v1", "productpage", "10.244.0.98"); len(got) != 0 {
		t.Errorf("productpage got WasmPlugin filters: %v", got)
	}
	got := lds("reviews-v1", "reviews", "10.244.0.13")
	only := func(list []string) bool {
		return len(list) > 0 && !slices.ContainsFunc(list, func(n string) bool { return n != wasmResource })
	}
	// virtualInbound: one per HTTP chain of 9080 (plaintext and mTLS).
	if !only(got["virtualInbound"]) || !slices.Equal(got["0.0.0.0_9080"], []string{wasmResource}) {
		t.Fatalf("reviews' WasmPlugin filters %v", got)
	}

	// SotW: subscribe by name, as Envoy does on seeing the filter; then a
	// change of the WasmPlugin is pushed.
	s, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := bootstraptest.SidecarNode(t, "reviews-v2", "default", "10.244.0.96", map[string]string{"app": "reviews"})
	if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: model.ExtensionConfigType, ResourceNames: []string{wasmResource}}); err != nil {
		t.Fatal(err)
	}
	resp := recvType(t, s, model.ExtensionConfigType)
	if u := moduleURL(t, resp); u != "oci://registry.example/auth:1" {
		t.Fatalf("module %q", u)
	}
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: model.ExtensionConfigType, ResourceNames: []string{wasmResource},
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, pluginFile, strings.ReplaceAll(wasmPluginYAML, "VERSION", "2"))
	if u := moduleURL(t, recvType(t, s, model.ExtensionConfigType)); u != "oci://registry.example/auth:2" {
		t.Fatalf("module after the change %q", u)
	}

	// An Envoy-like client (adsc, following LDS filters' config_discovery
	// to ECDS), SotW and Delta: its config is complete only with the plugin.
	for _, delta := range []bool{false, true} {
		c := bootstraptest.RunClient(t, srv, adsc.Config{Delta: delta,
			Node:  bootstraptest.SidecarNode(t, "reviews-v1", "default", "10.244.0.13", map[string]string{"app": "reviews"}),
			Types: []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType, model.ExtensionConfigType}})
		bootstraptest.WaitClient(t, c, "a complete config with the WasmPlugin", func(c *adsc.Client) bool {
			return c.Complete() && c.Resources(model.ExtensionConfigType)[wasmResource] != nil
		})
	}

	// Delta, by hand.
	d, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node = bootstraptest.SidecarNode(t, "reviews-v3", "default", "10.244.0.95", map[string]string{"app": "reviews"})
	if err := d.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: model.ExtensionConfigType, ResourceNamesSubscribe: []string{wasmResource}}); err != nil {
		t.Fatal(err)
	}
	for {
		dr, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if dr.GetTypeUrl() != model.ExtensionConfigType {
			continue
		}
		if len(dr.GetResources()) != 1 || dr.GetResources()[0].GetName() != wasmResource {
			t.Fatalf("delta ECDS %v", dr)
		}
		break
	}
}
