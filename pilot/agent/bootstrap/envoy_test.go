package bootstrap

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/agent/config"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// testConfig is a sidecar's config from a pod's environment plus extra.
func testConfig(t *testing.T, extra map[string]string) *config.Config {
	t.Helper()
	env := map[string]string{
		"POD_NAME": "reviews-v1-abc", "POD_NAMESPACE": "bookinfo", "INSTANCE_IP": "10.1.2.3",
		"SERVICE_ACCOUNT": "bookinfo-reviews", "ISTIO_METAJSON_LABELS": `{"app":"reviews","version":"v1"}`,
	}
	for k, v := range extra {
		env[k] = v
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	cfg, err := config.FromEnv("", func(k string) string { return env[k] }, environ)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func findCluster(t *testing.T, b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	t.Helper()
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	t.Fatalf("no static cluster %q", name)
	return nil
}

func endpointAddress(c *clusterv3.Cluster) *corev3.Address {
	return c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress()
}

func TestEnvoy(t *testing.T) {
	cfg := testConfig(t, nil)
	b, err := Envoy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("ValidateAll: %v", err)
	}
	checkEnvoy(t, cfg, b)
}

// checkEnvoy asserts the facts of Istio's bootstrap on b.
func checkEnvoy(t *testing.T, cfg *config.Config, b *bootstrapv3.Bootstrap) {
	t.Helper()
	p, err := model.ParseProxy(b.GetNode())
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	if p.ID != "sidecar~10.1.2.3~reviews-v1-abc.bookinfo~bookinfo.svc.cluster.local" || p.Labels()["app"] != "reviews" {
		t.Errorf("node id %q labels %v", p.ID, p.Labels())
	}
	if got := b.GetNode().GetCluster(); got != "reviews.bookinfo" {
		t.Errorf("node cluster %q, want reviews.bookinfo", got)
	}

	ads := b.GetDynamicResources().GetAdsConfig()
	wantType := corev3.ApiConfigSource_DELTA_GRPC
	if !cfg.DeltaXDS {
		wantType = corev3.ApiConfigSource_GRPC
	}
	if ads.GetApiType() != wantType || ads.GetTransportApiVersion() != corev3.ApiVersion_V3 || !ads.GetSetNodeOnFirstMessageOnly() ||
		ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != XDSCluster {
		t.Errorf("ads_config %v", ads)
	}
	for name, cs := range map[string]*corev3.ConfigSource{"cds": b.GetDynamicResources().GetCdsConfig(), "lds": b.GetDynamicResources().GetLdsConfig()} {
		if cs.GetAds() == nil || cs.GetResourceApiVersion() != corev3.ApiVersion_V3 {
			t.Errorf("%s_config %v", name, cs)
		}
	}

	for name, path := range map[string]string{XDSCluster: cfg.XDSSocket, SDSCluster: cfg.SDSSocket} {
		c := findCluster(t, b, name)
		if got := endpointAddress(c).GetPipe().GetPath(); got != path {
			t.Errorf("cluster %s pipe %q, want %q", name, got, path)
		}
		opts := &upstreamhttpv3.HttpProtocolOptions{}
		if err := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey].UnmarshalTo(opts); err != nil {
			t.Fatalf("cluster %s protocol options: %v", name, err)
		}
		if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
			t.Errorf("cluster %s is not HTTP/2: %v", name, opts)
		}
	}
	for name, port := range map[string]int{PrometheusCluster: cfg.AdminPort, AgentCluster: cfg.StatusPort} {
		sa := endpointAddress(findCluster(t, b, name)).GetSocketAddress()
		if sa.GetAddress() != "127.0.0.1" || int(sa.GetPortValue()) != port {
			t.Errorf("cluster %s endpoint %v, want 127.0.0.1:%d", name, sa, port)
		}
	}

	admin := b.GetAdmin().GetAddress().GetSocketAddress()
	if admin.GetAddress() != "127.0.0.1" || int(admin.GetPortValue()) != cfg.AdminPort {
		t.Errorf("admin address %v", admin)
	}

	wantListeners := map[int][2]string{cfg.StatsPort: {StatsPath, PrometheusCluster}, cfg.ReadinessPort: {ReadyPath, AgentCluster}}
	if n := len(b.GetStaticResources().GetListeners()); n != len(wantListeners) {
		t.Errorf("%d static listeners, want %d", n, len(wantListeners))
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		sa := l.GetAddress().GetSocketAddress()
		want, ok := wantListeners[int(sa.GetPortValue())]
		if !ok || sa.GetAddress() != "0.0.0.0" {
			t.Errorf("unexpected listener on %v", sa)
			continue
		}
		route := listenerRoute(t, l)
		if route.GetMatch().GetPrefix() != want[0] || route.GetRoute().GetCluster() != want[1] {
			t.Errorf("listener %d routes %v", sa.GetPortValue(), route)
		}
	}
}

func listenerRoute(t *testing.T, l *listenerv3.Listener) *routev3.Route {
	t.Helper()
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatalf("listener HCM: %v", err)
	}
	if hf := hcm.GetHttpFilters(); len(hf) != 1 || hf[0].GetName() != "envoy.filters.http.router" {
		t.Errorf("http filters %v", hf)
	}
	return hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0]
}

func TestEnvoySotW(t *testing.T) {
	cfg := testConfig(t, map[string]string{"ISTIO_DELTA_XDS": "false"})
	b, err := Envoy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.GetDynamicResources().GetAdsConfig().GetApiType(); got != corev3.ApiConfigSource_GRPC {
		t.Errorf("api_type %v, want GRPC", got)
	}
}

func TestEnvoyIPv6(t *testing.T) {
	cfg := testConfig(t, map[string]string{"INSTANCE_IP": "fd00::3"})
	b, err := Envoy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.GetAdmin().GetAddress().GetSocketAddress().GetAddress(); got != "::1" {
		t.Errorf("admin address %q, want ::1", got)
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		if got := l.GetAddress().GetSocketAddress().GetAddress(); got != "::" {
			t.Errorf("listener address %q, want ::", got)
		}
	}
}

func TestEnvoyInvalid(t *testing.T) {
	cfg := testConfig(t, nil)
	cfg.XDSSocket = "" // a pipe needs a path
	if _, err := Envoy(cfg); err == nil || !strings.Contains(err.Error(), "Envoy bootstrap") {
		t.Errorf("Envoy with an empty XDS socket path: error %v, want a validation error", err)
	}
}

// TestWriteEnvoyRoundTrip reads the written file back as Envoy would.
func TestWriteEnvoyRoundTrip(t *testing.T) {
	cfg := testConfig(t, map[string]string{"PROXY_CONFIG": "configPath: " + filepath.Join(t.TempDir(), "proxy")})
	path, err := WriteEnvoy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cfg.ConfigDir, "envoy-rev.json"); path != want || EnvoyPath(cfg) != want {
		t.Errorf("WriteEnvoy path %q EnvoyPath %q, want %q", path, EnvoyPath(cfg), want)
	}
	js, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, got); err != nil {
		t.Fatalf("read back %s: %v", path, err)
	}
	if err := got.ValidateAll(); err != nil {
		t.Fatalf("read back ValidateAll: %v", err)
	}
	want, err := Envoy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(want, got) {
		t.Errorf("the file differs from Envoy(cfg):\n%s", js)
	}
	checkEnvoy(t, cfg, got)
	// Rewriting replaces the file and leaves no temporary behind.
	if _, err := WriteEnvoy(cfg); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(cfg.ConfigDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != EnvoyFileName {
		t.Errorf("config dir holds %v, want only %s", entries, EnvoyFileName)
	}
}

// The config sources refuse regexes over the program size the proxies we
// bootstrap accept, no more and no less.
func TestRegexLimitMatchesValidation(t *testing.T) {
	b, err := Envoy(testConfig(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, layer := range b.GetLayeredRuntime().GetLayers() {
		if v, ok := layer.GetStaticLayer().GetFields()["re2.max_program_size.error_level"]; ok {
			if want := strconv.Itoa(validation.ProxyMaxRegexProgramSize); v.GetStringValue() != want {
				t.Fatalf("bootstrap re2.max_program_size.error_level = %q, validation allows %s", v.GetStringValue(), want)
			}
			return
		}
	}
	t.Fatal("bootstrap sets no re2.max_program_size.error_level")
}

// TestTracing: the bootstrap's tracer is Istio's: by default Zipkin to
// zipkin.istio-system:9411 (a STRICT_DNS cluster "zipkin", HTTP JSON to
// /api/v2/spans, 128-bit IDs); a PROXY_CONFIG Datadog tracer reports to
// datadog_agent under the service cluster; no tracing, no tracer; an
// address that is not HOST:PORT is an error naming the field.
func TestTracing(t *testing.T) {
	b, err := Envoy(testConfig(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	zc := &tracev3.ZipkinConfig{}
	if b.GetTracing().GetHttp().GetName() != "envoy.tracers.zipkin" || b.GetTracing().GetHttp().GetTypedConfig().UnmarshalTo(zc) != nil ||
		zc.GetCollectorCluster() != ZipkinCluster || zc.GetCollectorEndpoint() != "/api/v2/spans" || !zc.GetTraceId_128Bit() ||
		zc.GetCollectorEndpointVersion() != tracev3.ZipkinConfig_HTTP_JSON {
		t.Fatalf("default tracer %v", b.GetTracing())
	}
	c := clusterNamed(b, ZipkinCluster)
	addr := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if c.GetType() != clusterv3.Cluster_STRICT_DNS || addr.GetAddress() != "zipkin.istio-system" || addr.GetPortValue() != 9411 {
		t.Errorf("zipkin cluster %v", c)
	}

	b, err = Envoy(testConfig(t, map[string]string{"PROXY_CONFIG": `{"tracing": {"datadog": {"address": "dd-agent.monitoring:8126"}}}`}))
	if err != nil {
		t.Fatal(err)
	}
	dc := &tracev3.DatadogConfig{}
	if b.GetTracing().GetHttp().GetTypedConfig().UnmarshalTo(dc) != nil || dc.GetCollectorCluster() != DatadogCluster ||
		dc.GetServiceName() != b.GetNode().GetCluster() || clusterNamed(b, DatadogCluster) == nil || clusterNamed(b, ZipkinCluster) != nil {
		t.Errorf("datadog tracer %v", b.GetTracing())
	}

	b, err = Envoy(testConfig(t, map[string]string{"PROXY_CONFIG": `{"tracing": {}}`}))
	if err != nil || b.GetTracing() != nil || clusterNamed(b, ZipkinCluster) != nil {
		t.Errorf("no tracing: %v, %v", b.GetTracing(), err)
	}

	_, err = Envoy(testConfig(t, map[string]string{"PROXY_CONFIG": `{"tracing": {"zipkin": {"address": "zipkin"}}}`}))
	if err == nil || !strings.Contains(err.Error(), "tracing.zipkin.address") {
		t.Errorf("bad zipkin address: %v", err)
	}
}

func clusterNamed(b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}
