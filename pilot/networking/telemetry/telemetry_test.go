package telemetry_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	samplersv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/tracers/opentelemetry/samplers/v3"
	tracingv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	stats "istio.io/api/envoy/extensions/stats"
	meshconfig "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"
	"istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
)

// statsOf is the stats config of the HTTP chain of port 9080 (inbound:
// virtualInbound's plaintext chain; outbound: 0.0.0.0_9080), nil if none.
func statsOf(t *testing.T, ls map[string]*listenerv3.Listener, inbound bool) *stats.PluginConfig {
	t.Helper()
	var fc *listenerv3.FilterChain
	if inbound {
		for _, c := range ls["virtualInbound"].GetFilterChains() {
			if c.GetFilterChainMatch().GetDestinationPort().GetValue() == 9080 && nt.ConnectionManager(t, c) != nil {
				fc = c
			}
		}
	} else {
		fc = ls["0.0.0.0_9080"].GetFilterChains()[0]
	}
	for _, f := range nt.ConnectionManager(t, fc).GetHttpFilters() {
		if f.GetName() == telemetry.StatsName {
			pc := &stats.PluginConfig{}
			if err := f.GetTypedConfig().UnmarshalTo(pc); err != nil {
				t.Fatal(err)
			}
			return pc
		}
	}
	return nil
}

func prometheusMesh() *meshconfig.MeshConfig {
	return &meshconfig.MeshConfig{RootNamespace: "istio-system",
		DefaultProviders: &meshconfig.MeshConfig_DefaultProviders{Metrics: []string{"prometheus"}}}
}

func telemetryConfig(name, ns string, spec *tpb.Telemetry) model.Config {
	return model.Config{Meta: model.Meta{Kind: model.KindTelemetry, Name: name, Namespace: ns}, Spec: spec}
}

func metricsOverride(metric tpb.MetricSelector_IstioMetric, mode tpb.WorkloadMode, o *tpb.MetricsOverrides) *tpb.Telemetry {
	o.Match = &tpb.MetricSelector{MetricMatch: &tpb.MetricSelector_Metric{Metric: metric}, Mode: mode}
	return &tpb.Telemetry{Metrics: []*tpb.Metrics{{Overrides: []*tpb.MetricsOverrides{o}}}}
}

func build(t *testing.T, mesh *meshconfig.MeshConfig, proxy *model.Proxy, configs ...model.Config) map[string]*listenerv3.Listener {
	t.Helper()
	in := nt.Bookinfo(t)
	in.Mesh = mesh
	in.Configs = append(in.Configs, configs...)
	return sidecar(t, in.PushContext(), proxy)
}

// TestMetricsOverrides: with prometheus the default provider, every
// listener has the stats filter with Istio's defaults; a Telemetry that
// drops a client metric and one that adds a tag change exactly that metric
// on exactly that side.
func TestMetricsOverrides(t *testing.T) {
	proxy := nt.BookinfoProxy("reviews-v1")
	none := build(t, &meshconfig.MeshConfig{RootNamespace: "istio-system"}, proxy)
	if statsOf(t, none, true) != nil || statsOf(t, none, false) != nil {
		t.Fatal("stats filter without a metrics provider")
	}
	base := build(t, prometheusMesh(), proxy)
	if in := statsOf(t, base, true); in == nil || len(in.GetMetrics()) != 0 || !in.GetDisableHostHeaderFallback() {
		t.Fatalf("inbound stats %v, want defaults with host header fallback disabled", in)
	}
	if out := statsOf(t, base, false); out == nil || len(out.GetMetrics()) != 0 || out.GetDisableHostHeaderFallback() {
		t.Fatalf("outbound stats %v, want defaults", out)
	}

	drop := telemetryConfig("drop", "default", metricsOverride(tpb.MetricSelector_REQUEST_DURATION, tpb.WorkloadMode_CLIENT,
		&tpb.MetricsOverrides{Disabled: wrapperspb.Bool(true)}))
	got := build(t, prometheusMesh(), proxy, drop)
	want := &stats.PluginConfig{Metrics: []*stats.MetricConfig{{Name: "request_duration_milliseconds", Drop: true, Dimensions: map[string]string{}}}}
	if out := statsOf(t, got, false); !proto.Equal(out, want) {
		t.Errorf("client stats with REQUEST_DURATION disabled: %v, want %v", out, want)
	}
	if in := statsOf(t, got, true); !proto.Equal(in, statsOf(t, base, true)) {
		t.Errorf("a CLIENT override changed the server side: %v", in)
	}

	tag := telemetryConfig("tag", "default", metricsOverride(tpb.MetricSelector_REQUEST_COUNT, tpb.WorkloadMode_SERVER,
		&tpb.MetricsOverrides{TagOverrides: map[string]*tpb.MetricsOverrides_TagOverride{
			"request_host":     {Value: "request.host"},
			"destination_port": {Operation: tpb.MetricsOverrides_TagOverride_REMOVE},
		}}))
	got = build(t, prometheusMesh(), proxy, tag)
	want = &stats.PluginConfig{DisableHostHeaderFallback: true, Metrics: []*stats.MetricConfig{{
		Name: "requests_total", Dimensions: map[string]string{"request_host": "request.host"}, TagsToRemove: []string{"destination_port"}}}}
	if in := statsOf(t, got, true); !proto.Equal(in, want) {
		t.Errorf("server stats with a tag added and one removed: %v, want %v", in, want)
	}
	if out := statsOf(t, got, false); !proto.Equal(out, statsOf(t, base, false)) {
		t.Errorf("a SERVER override changed the client side: %v", out)
	}

	// ALL_METRICS disabled drops the filter.
	off := telemetryConfig("off", "default", metricsOverride(tpb.MetricSelector_ALL_METRICS, tpb.WorkloadMode_CLIENT_AND_SERVER,
		&tpb.MetricsOverrides{Disabled: wrapperspb.Bool(true)}))
	got = build(t, prometheusMesh(), proxy, off)
	if statsOf(t, got, true) != nil || statsOf(t, got, false) != nil {
		t.Error("ALL_METRICS disabled left a stats filter")
	}
}

// TestScope: a namespace's Telemetry reaches its namespace's workloads and
// no other; a selector reaches only the workloads it selects; the root
// namespace's reaches everyone, and a namespace's overrides it.
func TestScope(t *testing.T) {
	drop := func(name, ns string, sel map[string]string) model.Config {
		spec := metricsOverride(tpb.MetricSelector_REQUEST_COUNT, tpb.WorkloadMode_CLIENT, &tpb.MetricsOverrides{Disabled: wrapperspb.Bool(true)})
		if sel != nil {
			spec.Selector = &v1beta1.WorkloadSelector{MatchLabels: sel}
		}
		return telemetryConfig(name, ns, spec)
	}
	dropped := func(ls map[string]*listenerv3.Listener) bool {
		return len(statsOf(t, ls, false).GetMetrics()) == 1
	}
	other := nt.Proxy("10.244.9.9", "client", "other", map[string]string{"app": "client"})
	// other has no 9080 outbound listener of its own unless it sees Bookinfo: it does (exportTo *).
	ns := drop("ns", "default", nil)
	if !dropped(build(t, prometheusMesh(), nt.BookinfoProxy("reviews-v1"), ns)) {
		t.Error("namespace Telemetry did not reach a workload of its namespace")
	}
	if dropped(build(t, prometheusMesh(), other, ns)) {
		t.Error("namespace Telemetry reached another namespace")
	}
	sel := drop("sel", "default", map[string]string{"app": "ratings"})
	if dropped(build(t, prometheusMesh(), nt.BookinfoProxy("reviews-v1"), sel)) {
		t.Error("selector Telemetry reached an unselected workload")
	}
	if !dropped(build(t, prometheusMesh(), nt.BookinfoProxy("ratings-v1"), sel)) {
		t.Error("selector Telemetry did not reach its workload")
	}
	root := drop("root", "istio-system", nil)
	if !dropped(build(t, prometheusMesh(), other, root)) {
		t.Error("root namespace Telemetry did not reach every namespace")
	}
	// A namespace-wide metrics section naming no overrides keeps the root's.
	keep := telemetryConfig("keep", "other", &tpb.Telemetry{Metrics: []*tpb.Metrics{{}}})
	if !dropped(build(t, prometheusMesh(), other, root, keep)) {
		t.Error("an empty namespace metrics section dropped the root's overrides")
	}
}

// TestTracingSampling: the Telemetry API's randomSamplingPercentage sets
// the HCM's random sampling, on the workloads it selects only.
func TestTracingSampling(t *testing.T) {
	mesh := &meshconfig.MeshConfig{RootNamespace: "istio-system", EnableTracing: true,
		ExtensionProviders: []*meshconfig.MeshConfig_ExtensionProvider{{Name: "zipkin",
			Provider: &meshconfig.MeshConfig_ExtensionProvider_Zipkin{Zipkin: &meshconfig.MeshConfig_ExtensionProvider_ZipkinTracingProvider{
				Service: "reviews.default.svc.cluster.local", Port: 9080}}}}}
	spec := &tpb.Telemetry{Selector: &v1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "reviews"}},
		Tracing: []*tpb.Tracing{{Providers: []*tpb.ProviderRef{{Name: "zipkin"}}, RandomSamplingPercentage: wrapperspb.Double(10)}}}
	cfg := telemetryConfig("sampling", "default", spec)
	sampling := func(ls map[string]*listenerv3.Listener) (float64, string) {
		tr := nt.ConnectionManager(t, ls["0.0.0.0_9080"].GetFilterChains()[0]).GetTracing()
		return tr.GetRandomSampling().GetValue(), tr.GetProvider().GetName()
	}
	if got, p := sampling(build(t, mesh, nt.BookinfoProxy("reviews-v1"), cfg)); got != 10 || p != "envoy.tracers.zipkin" {
		t.Errorf("selected workload: sampling %v provider %q, want 10 and zipkin", got, p)
	}
	if got, p := sampling(build(t, mesh, nt.BookinfoProxy("ratings-v1"), cfg)); got != 1 || p != "" {
		t.Errorf("other workload: sampling %v provider %q, want the mesh's 1 and the bootstrap's tracer", got, p)
	}

	// Custom tags of each kind, formatter included (Envoy's value tag).
	spec.Tracing[0].CustomTags = map[string]*tpb.Tracing_CustomTag{
		"lit":  {Type: &tpb.Tracing_CustomTag_Literal{Literal: &tpb.Tracing_Literal{Value: "v"}}},
		"sni":  {Type: &tpb.Tracing_CustomTag_Formatter{Formatter: &tpb.Tracing_Formatter{Value: "%REQUESTED_SERVER_NAME%"}}},
		"user": {Type: &tpb.Tracing_CustomTag_Header{Header: &tpb.Tracing_RequestHeader{Name: "x-user"}}},
	}
	tags := map[string]*tracingv3.CustomTag{}
	for _, ct := range nt.ConnectionManager(t, build(t, mesh, nt.BookinfoProxy("reviews-v1"), cfg)["0.0.0.0_9080"].GetFilterChains()[0]).GetTracing().GetCustomTags() {
		tags[ct.GetTag()] = ct
	}
	if tags["lit"].GetLiteral().GetValue() != "v" || tags["sni"].GetValue() != "%REQUESTED_SERVER_NAME%" || tags["user"].GetRequestHeader().GetName() != "x-user" {
		t.Errorf("custom tags %v", tags)
	}
}

// TestMatchesIstiod: with tracing enabled (Istio's default) and the node
// metadata istiod's fixture proxies sent, reviews-v1's metadata exchange
// filters, grpc_stats and tracing are the ones istiod sent, on the chains
// it sent them on.
func TestMatchesIstiod(t *testing.T) {
	dir := fixtures.Shared(t, "istiod-xds/bookinfo/reviews-v1/envoy.config.listener.v3.Listener")
	compared := map[string]int{}
	proxy := nt.BookinfoProxy("reviews-v1")
	proxy.Metadata.ClusterID, proxy.Metadata.MeshID = "Kubernetes", "cluster.local"
	ours := build(t, &meshconfig.MeshConfig{RootNamespace: "istio-system", EnableTracing: true}, proxy)
	for _, name := range []string{"virtualInbound", "0.0.0.0_9080"} {
		// Our chains are not istiod's one for one (another test holds
		// that); every chain must carry what all of istiod's carry.
		want := chainsOf(fixtureJSON(t, filepath.Join(dir, name+".json")))
		var wantMX any
		var wantHCM map[string]any
		for _, wc := range want {
			wf := wc["filters"].([]any)
			if name == "virtualInbound" {
				if wantMX != nil && !reflect.DeepEqual(wantMX, wf[0]) {
					t.Fatalf("istiod's virtualInbound chains start differently")
				}
				wantMX = wf[0]
			}
			if h := hcmJSON(wf); h != nil && wantHCM == nil {
				wantHCM = h
			}
		}
		for _, gc := range chainsOf(toJSON(t, ours[name])) {
			key := gc["name"]
			compared[name]++
			gf := gc["filters"].([]any)
			if name == "virtualInbound" && !reflect.DeepEqual(gf[0], wantMX) {
				t.Errorf("%s chain %s first filter\n got %v\nwant %v", name, key, gf[0], wantMX)
			}
			gh := hcmJSON(gf)
			if gh == nil {
				continue
			}
			for _, field := range []string{"tracing", "requestIdExtension"} {
				if !reflect.DeepEqual(gh[field], wantHCM[field]) {
					t.Errorf("%s chain %s %s\n got %v\nwant %v", name, key, field, gh[field], wantHCM[field])
				}
			}
			ghf, whf := gh["httpFilters"].([]any), wantHCM["httpFilters"].([]any)
			for _, n := range []string{telemetry.MetadataExchangeName, telemetry.GRPCStatsName} {
				if g, w := filterNamed(ghf, n), filterNamed(whf, n); !reflect.DeepEqual(g, w) {
					t.Errorf("%s chain %s HTTP filter %s\n got %v\nwant %v", name, key, n, g, w)
				}
			}
			if !reflect.DeepEqual(ghf[0], whf[0]) {
				t.Errorf("%s chain %s: first HTTP filter %v, want %v", name, key, ghf[0], whf[0])
			}
		}
	}
	if compared["virtualInbound"] < 4 || compared["0.0.0.0_9080"] < 1 {
		t.Errorf("compared chains %v, want virtualInbound's and 0.0.0.0_9080's", compared)
	}
}

func fixtureJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func toJSON(t *testing.T, m proto.Message) map[string]any {
	t.Helper()
	raw, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// chainsOf returns a listener's chains, the default one last.
func chainsOf(l map[string]any) []map[string]any {
	var out []map[string]any
	add := func(c any) {
		if fc, _ := c.(map[string]any); fc != nil {
			out = append(out, fc)
		}
	}
	for _, c := range l["filterChains"].([]any) {
		add(c)
	}
	add(l["defaultFilterChain"])
	return out
}

func hcmJSON(filters []any) map[string]any {
	for _, f := range filters {
		if fm := f.(map[string]any); fm["name"] == wellknown.HTTPConnectionManager {
			return fm["typedConfig"].(map[string]any)
		}
	}
	return nil
}

func filterNamed(filters []any, name string) any {
	for _, f := range filters {
		if f.(map[string]any)["name"] == name {
			return f
		}
	}
	return nil
}

// TestClusterMetadataExchangeMatchesIstiod: reviews-v1's outbound clusters
// and PassthroughCluster carry istiod's upstream metadata exchange filter;
// the inbound, BlackHole and InboundPassthrough clusters none, as istiod's.
func TestClusterMetadataExchangeMatchesIstiod(t *testing.T) {
	dir := fixtures.Shared(t, "istiod-xds/bookinfo/reviews-v1/envoy.config.cluster.v3.Cluster")
	in := nt.Bookinfo(t)
	cs, err := cluster.Build(nt.BookinfoProxy("reviews-v1"), in.PushContext())
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range cs {
		path := filepath.Join(dir, strings.NewReplacer("|", "_", ":", "_", "/", "_", "~", "_").Replace(c.GetName())+".json")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		want := fixtureJSON(t, path)["filters"]
		got := toJSON(t, c)["filters"]
		if !reflect.DeepEqual(got, want) {
			t.Errorf("cluster %s filters\n got %v\nwant %v", c.GetName(), got, want)
		}
		checked++
	}
	if checked < 10 {
		t.Errorf("compared %d clusters with istiod's, want most of reviews-v1's", checked)
	}
}

// TestGRPCAccessLogServices: envoyHttpAls logs on HTTP connection managers
// only and envoyTcpAls on tcp_proxy only, each to its service's outbound
// cluster with istiod's default log names and the peer metadata to log.
func TestGRPCAccessLogServices(t *testing.T) {
	in := nt.Scale(10)
	in.Mesh = &meshconfig.MeshConfig{RootNamespace: "istio-system",
		DefaultProviders: &meshconfig.MeshConfig_DefaultProviders{AccessLogging: []string{"http-als", "tcp-als"}},
		ExtensionProviders: []*meshconfig.MeshConfig_ExtensionProvider{
			{Name: "http-als", Provider: &meshconfig.MeshConfig_ExtensionProvider_EnvoyHttpAls{EnvoyHttpAls: &meshconfig.MeshConfig_ExtensionProvider_EnvoyHttpGrpcV3LogProvider{
				Service: "svc-1.ns1.svc.cluster.local", Port: 8080, AdditionalRequestHeadersToLog: []string{"x-user"}}}},
			{Name: "tcp-als", Provider: &meshconfig.MeshConfig_ExtensionProvider_EnvoyTcpAls{EnvoyTcpAls: &meshconfig.MeshConfig_ExtensionProvider_EnvoyTcpGrpcV3LogProvider{
				Service: "svc-1.ns1.svc.cluster.local", Port: 8080, LogName: "tcp-log"}}},
		}}
	ls := sidecar(t, in.PushContext(), nt.ScaleProxy())
	httpSeen, tcpSeen := 0, 0
	for name, l := range ls {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var logs []*accesslogv3.AccessLog
				want := telemetry.HTTPGrpcLogName
				switch f.GetName() {
				case wellknown.HTTPConnectionManager:
					h := &hcmv3.HttpConnectionManager{}
					if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
						t.Fatal(err)
					}
					logs = h.GetAccessLog()
					httpSeen++
				case wellknown.TCPProxy:
					tp := &tcpv3.TcpProxy{}
					if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
						t.Fatal(err)
					}
					if tp.GetCluster() == "BlackHoleCluster" {
						continue
					}
					logs, want = tp.GetAccessLog(), telemetry.TCPGrpcLogName
					tcpSeen++
				default:
					continue
				}
				if len(logs) != 1 || logs[0].GetName() != want {
					t.Fatalf("%s %s %s: access logs %v, want one %s", name, fc.GetName(), f.GetName(), logs, want)
				}
				if want == telemetry.HTTPGrpcLogName {
					cfg := &grpcalsv3.HttpGrpcAccessLogConfig{}
					if err := logs[0].GetTypedConfig().UnmarshalTo(cfg); err != nil {
						t.Fatal(err)
					}
					c := cfg.GetCommonConfig()
					if c.GetLogName() != "http_envoy_accesslog" || c.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "outbound|8080||svc-1.ns1.svc.cluster.local" ||
						!slices.Equal(cfg.GetAdditionalRequestHeadersToLog(), []string{"x-user"}) || len(c.GetFilterStateObjectsToLog()) == 0 {
						t.Errorf("http ALS %v", cfg)
					}
				} else {
					cfg := &grpcalsv3.TcpGrpcAccessLogConfig{}
					if err := logs[0].GetTypedConfig().UnmarshalTo(cfg); err != nil || cfg.GetCommonConfig().GetLogName() != "tcp-log" {
						t.Errorf("tcp ALS %v, %v", cfg, err)
					}
				}
			}
		}
	}
	if httpSeen == 0 || tcpSeen == 0 {
		t.Fatalf("%d connection managers, %d tcp_proxies", httpSeen, tcpSeen)
	}
}

// TestOpenTelemetryExtras: an opentelemetry tracing provider's resource
// detectors (environment, dynatrace), Dynatrace sampler (to its API's
// outbound cluster, with its headers) and OTLP/HTTP headers reach the
// tracer config.
func TestOpenTelemetryExtras(t *testing.T) {
	mesh := &meshconfig.MeshConfig{RootNamespace: "istio-system",
		DefaultProviders: &meshconfig.MeshConfig_DefaultProviders{Tracing: []string{"otel"}},
		ExtensionProviders: []*meshconfig.MeshConfig_ExtensionProvider{{Name: "otel",
			Provider: &meshconfig.MeshConfig_ExtensionProvider_Opentelemetry{Opentelemetry: &meshconfig.MeshConfig_ExtensionProvider_OpenTelemetryTracingProvider{
				Service: "reviews.default.svc.cluster.local", Port: 9080,
				Http: &meshconfig.MeshConfig_ExtensionProvider_HttpService{Path: "/v1/traces", Headers: []*meshconfig.MeshConfig_ExtensionProvider_HttpHeader{
					{Name: "x-tenant", HeaderValue: &meshconfig.MeshConfig_ExtensionProvider_HttpHeader_Value{Value: "t1"}}}},
				ResourceDetectors: &meshconfig.MeshConfig_ExtensionProvider_ResourceDetectors{
					Environment: &meshconfig.MeshConfig_ExtensionProvider_ResourceDetectors_EnvironmentResourceDetector{},
					Dynatrace:   &meshconfig.MeshConfig_ExtensionProvider_ResourceDetectors_DynatraceResourceDetector{},
				},
				Sampling: &meshconfig.MeshConfig_ExtensionProvider_OpenTelemetryTracingProvider_DynatraceSampler_{
					DynatraceSampler: &meshconfig.MeshConfig_ExtensionProvider_OpenTelemetryTracingProvider_DynatraceSampler{
						Tenant: "abc", ClusterId: 7, RootSpansPerMinute: 500,
						HttpService: &meshconfig.MeshConfig_ExtensionProvider_OpenTelemetryTracingProvider_DynatraceSampler_DynatraceApi{
							Service: "ratings.default.svc.cluster.local", Port: 9080,
							Http: &meshconfig.MeshConfig_ExtensionProvider_HttpService{Path: "api/v2/samplingConfiguration"}},
					}},
			}}}}}
	ls := build(t, mesh, nt.BookinfoProxy("reviews-v1"))
	tr := nt.ConnectionManager(t, ls["0.0.0.0_9080"].GetFilterChains()[0]).GetTracing()
	oc := &tracev3.OpenTelemetryConfig{}
	if err := tr.GetProvider().GetTypedConfig().UnmarshalTo(oc); err != nil {
		t.Fatalf("tracer %v: %v", tr.GetProvider(), err)
	}
	var detectors []string
	for _, d := range oc.GetResourceDetectors() {
		detectors = append(detectors, d.GetName())
	}
	if !slices.Equal(detectors, []string{"envoy.tracers.opentelemetry.resource_detectors.environment", "envoy.tracers.opentelemetry.resource_detectors.dynatrace"}) {
		t.Errorf("resource detectors %q", detectors)
	}
	if h := oc.GetHttpService(); h.GetHttpUri().GetUri() != "http://reviews.default.svc.cluster.local/v1/traces" ||
		len(h.GetRequestHeadersToAdd()) != 1 || h.GetRequestHeadersToAdd()[0].GetHeader().GetValue() != "t1" {
		t.Errorf("OTLP/HTTP service %v", h)
	}
	sc := &samplersv3.DynatraceSamplerConfig{}
	if oc.GetSampler().GetName() != "envoy.tracers.opentelemetry.samplers.dynatrace" || oc.GetSampler().GetTypedConfig().UnmarshalTo(sc) != nil ||
		sc.GetTenant() != "abc" || sc.GetClusterId() != 7 || sc.GetRootSpansPerMinute() != 500 ||
		sc.GetHttpService().GetHttpUri().GetCluster() != "outbound|9080||ratings.default.svc.cluster.local" {
		t.Errorf("sampler %v", oc.GetSampler())
	}
}
