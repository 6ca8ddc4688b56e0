package telemetry

import (
	"fmt"
	"sort"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	detectorsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/tracers/opentelemetry/resource_detectors/v3"
	samplersv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/tracers/opentelemetry/samplers/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	tracingv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"
)

// Labels the injector sets that name a workload's canonical service.
const (
	canonicalNameLabel     = "service.istio.io/canonical-name"
	canonicalRevisionLabel = "service.istio.io/canonical-revision"
)

// proxyTags are the proxy facts istiod adds to every span.
type proxyTags struct {
	canonicalService, canonicalRevision, clusterID, meshID, namespace string
}

func (t proxyTags) key() string {
	return t.canonicalService + "\x00" + t.canonicalRevision + "\x00" + t.clusterID + "\x00" + t.meshID + "\x00" + t.namespace
}

// tracingSpec is the merged tracing configuration of one mode.
type tracingSpec struct {
	provider   *meshconfig.MeshConfig_ExtensionProvider
	disabled   bool
	sampling   *float64
	customTags map[string]*tpb.Tracing_CustomTag
	// useRequestID is use_request_id_for_trace_sampling (default true).
	useRequestID bool
	// noIstioTags drops istiod's span tags (enableIstioTags false).
	noIstioTags bool
	// noContextPropagation is disableContextPropagation.
	noContextPropagation bool
}

// mergeTracing merges the tracing sections of the applied specs over the
// mesh's default tracing provider, by mode (client, server), as Istio
// does: later entries override provider, disableSpanReporting,
// customTags (as a whole) and randomSamplingPercentage. ok is false when
// neither says anything (then the mesh's enableTracing applies).
func mergeTracing(specs []*tpb.Telemetry, mesh *meshconfig.MeshConfig, lookup func(string) *meshconfig.MeshConfig_ExtensionProvider) (client, server tracingSpec, ok bool) {
	var tracing []*tpb.Tracing
	for _, s := range specs {
		tracing = append(tracing, s.GetTracing()...)
	}
	defaults := mesh.GetDefaultProviders().GetTracing()
	if len(tracing) == 0 && len(defaults) == 0 {
		return client, server, false
	}
	client.useRequestID, server.useRequestID = true, true
	if len(defaults) > 0 {
		client.provider = lookup(defaults[0])
		server.provider = client.provider
	}
	for _, t := range tracing {
		specs := []*tracingSpec{&client, &server}
		switch t.GetMatch().GetMode() {
		case tpb.WorkloadMode_CLIENT:
			specs = specs[:1]
		case tpb.WorkloadMode_SERVER:
			specs = specs[1:]
		}
		for _, s := range specs {
			if names := providerNames(t.GetProviders()); len(names) > 0 {
				s.provider = lookup(names[0])
			}
			if t.GetDisableSpanReporting() != nil {
				s.disabled = t.GetDisableSpanReporting().GetValue()
			}
			if t.GetCustomTags() != nil {
				s.customTags = t.GetCustomTags()
			}
			if t.GetRandomSamplingPercentage() != nil {
				v := t.GetRandomSamplingPercentage().GetValue()
				s.sampling = &v
			}
			if t.GetUseRequestIdForTraceSampling() != nil {
				s.useRequestID = t.GetUseRequestIdForTraceSampling().GetValue()
			}
			if t.GetEnableIstioTags() != nil {
				s.noIstioTags = !t.GetEnableIstioTags().GetValue()
			}
			if t.GetDisableContextPropagation() != nil {
				s.noContextPropagation = t.GetDisableContextPropagation().GetValue()
			}
		}
	}
	if client.provider == nil {
		client.disabled = true
	}
	if server.provider == nil {
		server.disabled = true
	}
	return client, server, true
}

// meshSampling is the proxy config's tracing sampling, Istio's default 1%
// when unset or out of range.
func meshSampling(mesh *meshconfig.MeshConfig) float64 {
	s := mesh.GetDefaultConfig().GetTracing().GetSampling()
	if s <= 0 || s > 100 {
		return 1
	}
	return s
}

// sampling sets the HCM sampling as istiod does: all client-forced and
// overall, random at pct.
func sampling(t *hcmv3.HttpConnectionManager_Tracing, pct float64) {
	t.ClientSampling = &typev3.Percent{Value: 100}
	t.RandomSampling = &typev3.Percent{Value: pct}
	t.OverallSampling = &typev3.Percent{Value: 100}
}

// customTags are istiod's span tags (unless noIstioTags): the RBAC dry-run
// results, the proxy's canonical service and revision, cluster, mesh and
// namespace, then extra (the Telemetry's customTags, else the proxy
// config's; formatter tags become Envoy's substitution-format value tags),
// sorted by tag.
func customTags(pt proxyTags, noIstioTags bool, extra map[string]*tpb.Tracing_CustomTag, fromMesh map[string]*meshconfig.Tracing_CustomTag) []*tracingv3.CustomTag {
	rbac := func(tag, key string) *tracingv3.CustomTag {
		return &tracingv3.CustomTag{Tag: tag, Type: &tracingv3.CustomTag_Metadata_{Metadata: &tracingv3.CustomTag_Metadata{
			Kind: &metadatav3.MetadataKind{Kind: &metadatav3.MetadataKind_Request_{Request: &metadatav3.MetadataKind_Request{}}},
			MetadataKey: &metadatav3.MetadataKey{Key: "envoy.filters.http.rbac",
				Path: []*metadatav3.MetadataKey_PathSegment{{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: key}}}},
		}}}
	}
	literal := func(tag, v string) *tracingv3.CustomTag {
		return &tracingv3.CustomTag{Tag: tag, Type: &tracingv3.CustomTag_Literal_{Literal: &tracingv3.CustomTag_Literal{Value: v}}}
	}
	tags := []*tracingv3.CustomTag{
		rbac("istio.authorization.dry_run.allow_policy.name", "istio_dry_run_allow_shadow_effective_policy_id"),
		rbac("istio.authorization.dry_run.allow_policy.result", "istio_dry_run_allow_shadow_engine_result"),
		rbac("istio.authorization.dry_run.deny_policy.name", "istio_dry_run_deny_shadow_effective_policy_id"),
		rbac("istio.authorization.dry_run.deny_policy.result", "istio_dry_run_deny_shadow_engine_result"),
		literal("istio.canonical_revision", pt.canonicalRevision),
		literal("istio.canonical_service", pt.canonicalService),
		literal("istio.cluster_id", pt.clusterID),
		literal("istio.mesh_id", pt.meshID),
		literal("istio.namespace", pt.namespace),
	}
	if noIstioTags {
		tags = nil
	}
	for name, t := range extra {
		switch v := t.GetType().(type) {
		case *tpb.Tracing_CustomTag_Literal:
			tags = append(tags, literal(name, v.Literal.GetValue()))
		case *tpb.Tracing_CustomTag_Environment:
			tags = append(tags, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Environment_{
				Environment: &tracingv3.CustomTag_Environment{Name: v.Environment.GetName(), DefaultValue: v.Environment.GetDefaultValue()}}})
		case *tpb.Tracing_CustomTag_Header:
			tags = append(tags, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_RequestHeader{
				RequestHeader: &tracingv3.CustomTag_Header{Name: v.Header.GetName(), DefaultValue: v.Header.GetDefaultValue()}}})
		case *tpb.Tracing_CustomTag_Formatter:
			tags = append(tags, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Value{Value: v.Formatter.GetValue()}})
		}
	}
	if extra == nil {
		for name, t := range fromMesh {
			switch v := t.GetType().(type) {
			case *meshconfig.Tracing_CustomTag_Literal:
				tags = append(tags, literal(name, v.Literal.GetValue()))
			case *meshconfig.Tracing_CustomTag_Environment:
				tags = append(tags, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Environment_{
					Environment: &tracingv3.CustomTag_Environment{Name: v.Environment.GetName(), DefaultValue: v.Environment.GetDefaultValue()}}})
			case *meshconfig.Tracing_CustomTag_Header:
				tags = append(tags, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_RequestHeader{
					RequestHeader: &tracingv3.CustomTag_Header{Name: v.Header.GetName(), DefaultValue: v.Header.GetDefaultValue()}}})
			}
		}
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i].GetTag() < tags[j].GetTag() })
	return tags
}

// Envoy tracer names.
const (
	zipkinTracer     = "envoy.tracers.zipkin"
	otelTracer       = "envoy.tracers.opentelemetry"
	datadogTracer    = "envoy.tracers.datadog"
	skywalkingTracer = "envoy.tracers.skywalking"
)

// tracingProvider is the HCM tracing of a tracing extension provider
// (zipkin, opentelemetry over gRPC or HTTP, datadog, skywalking) sending
// to the outbound cluster of its service; serviceCluster names the
// proxy's spans for the providers that take a service name.
func tracingProvider(p *meshconfig.MeshConfig_ExtensionProvider, clusters clusterLookup, serviceCluster string) (*hcmv3.HttpConnectionManager_Tracing, error) {
	var (
		name      string
		cfg       proto.Message
		maxTagLen uint32
		spawn     bool
	)
	switch prov := p.GetProvider().(type) {
	case *meshconfig.MeshConfig_ExtensionProvider_Zipkin:
		host, cluster, err := clusters(prov.Zipkin.GetService(), prov.Zipkin.GetPort())
		if err != nil {
			return nil, err
		}
		path := prov.Zipkin.GetPath()
		if path == "" {
			path = "/api/v2/spans"
		}
		name, maxTagLen = zipkinTracer, prov.Zipkin.GetMaxTagLength()
		cfg = &tracev3.ZipkinConfig{
			CollectorCluster: cluster, CollectorEndpoint: path, CollectorHostname: host,
			CollectorEndpointVersion: tracev3.ZipkinConfig_HTTP_JSON,
			TraceId_128Bit:           !prov.Zipkin.GetEnable_64BitTraceId(),
			SharedSpanContext:        wrapperspb.Bool(false),
		}
	case *meshconfig.MeshConfig_ExtensionProvider_Datadog:
		host, cluster, err := clusters(prov.Datadog.GetService(), prov.Datadog.GetPort())
		if err != nil {
			return nil, err
		}
		name, maxTagLen = datadogTracer, prov.Datadog.GetMaxTagLength()
		cfg = &tracev3.DatadogConfig{CollectorCluster: cluster, ServiceName: serviceCluster, CollectorHostname: host}
	case *meshconfig.MeshConfig_ExtensionProvider_Skywalking:
		host, cluster, err := clusters(prov.Skywalking.GetService(), prov.Skywalking.GetPort())
		if err != nil {
			return nil, err
		}
		name, spawn = skywalkingTracer, true
		cfg = &tracev3.SkyWalkingConfig{GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
			EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: host}}}}
	case *meshconfig.MeshConfig_ExtensionProvider_Opentelemetry:
		o := prov.Opentelemetry
		host, cluster, err := clusters(o.GetService(), o.GetPort())
		if err != nil {
			return nil, err
		}
		name, maxTagLen = otelTracer, o.GetMaxTagLength()
		oc := &tracev3.OpenTelemetryConfig{ServiceName: serviceCluster}
		if h := o.GetHttp(); h != nil {
			oc.HttpService = httpService(host, cluster, h)
		} else {
			oc.GrpcService = &corev3.GrpcService{
				TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: host}},
				Timeout:         o.GetGrpc().GetTimeout(),
			}
		}
		if err := otelExtras(oc, o, clusters); err != nil {
			return nil, fmt.Errorf("provider %s: %w", p.GetName(), err)
		}
		cfg = oc
	default:
		return nil, fmt.Errorf("provider %s does not support tracing (or is not supported)", p.GetName())
	}
	a, err := pack(cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing provider %s: %w", p.GetName(), err)
	}
	t := &hcmv3.HttpConnectionManager_Tracing{Provider: &tracev3.Tracing_Http{Name: name, ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: a}}}
	if maxTagLen > 0 {
		t.MaxPathTagLength = wrapperspb.UInt32(maxTagLen)
	}
	if spawn {
		t.SpawnUpstreamSpan = wrapperspb.Bool(true)
	}
	return t, nil
}

// httpService is an OTLP/HTTP (or Dynatrace API) endpoint: http://HOST/PATH
// on the service's outbound cluster, its timeout (5 s by default) and the
// headers with a value (those read from istiod's environment, envName, are
// not sent: generators read no process environment).
func httpService(host, cluster string, h *meshconfig.MeshConfig_ExtensionProvider_HttpService) *corev3.HttpService {
	out := &corev3.HttpService{HttpUri: &corev3.HttpUri{
		Uri:              "http://" + host + "/" + trimSlash(h.GetPath()),
		HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster},
		Timeout:          h.GetTimeout(),
	}}
	if out.HttpUri.Timeout == nil {
		out.HttpUri.Timeout = defaultTimeout()
	}
	for _, hd := range h.GetHeaders() {
		if v, ok := hd.GetHeaderValue().(*meshconfig.MeshConfig_ExtensionProvider_HttpHeader_Value); ok {
			out.RequestHeadersToAdd = append(out.RequestHeadersToAdd, &corev3.HeaderValueOption{
				Header: &corev3.HeaderValue{Key: hd.GetName(), Value: v.Value}})
		}
	}
	return out
}

// otelExtras adds an opentelemetry provider's resource detectors
// (environment, dynatrace) and Dynatrace sampler to oc, as istiod.
func otelExtras(oc *tracev3.OpenTelemetryConfig, o *meshconfig.MeshConfig_ExtensionProvider_OpenTelemetryTracingProvider, clusters clusterLookup) error {
	ext := func(name string, m proto.Message) (*corev3.TypedExtensionConfig, error) {
		a, err := pack(m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return &corev3.TypedExtensionConfig{Name: name, TypedConfig: a}, nil
	}
	if rd := o.GetResourceDetectors(); rd.GetEnvironment() != nil {
		e, err := ext("envoy.tracers.opentelemetry.resource_detectors.environment", &detectorsv3.EnvironmentResourceDetectorConfig{})
		if err != nil {
			return err
		}
		oc.ResourceDetectors = append(oc.ResourceDetectors, e)
	}
	if o.GetResourceDetectors().GetDynatrace() != nil {
		e, err := ext("envoy.tracers.opentelemetry.resource_detectors.dynatrace", &detectorsv3.DynatraceResourceDetectorConfig{})
		if err != nil {
			return err
		}
		oc.ResourceDetectors = append(oc.ResourceDetectors, e)
	}
	if ds := o.GetDynatraceSampler(); ds != nil {
		sc := &samplersv3.DynatraceSamplerConfig{Tenant: ds.GetTenant(), ClusterId: ds.GetClusterId(), RootSpansPerMinute: ds.GetRootSpansPerMinute()}
		if api := ds.GetHttpService(); api != nil {
			host, cluster, err := clusters(api.GetService(), api.GetPort())
			if err != nil {
				return fmt.Errorf("dynatraceSampler.httpService: %w", err)
			}
			sc.HttpService = httpService(host, cluster, api.GetHttp())
		}
		e, err := ext("envoy.tracers.opentelemetry.samplers.dynatrace", sc)
		if err != nil {
			return err
		}
		oc.Sampler = e
	}
	return nil
}

func trimSlash(s string) string {
	for len(s) > 0 && s[0] == '/' {
		s = s[1:]
	}
	return s
}

// defaultTimeout is the OTLP/HTTP export timeout when the provider sets none.
func defaultTimeout() *durationpb.Duration { return durationpb.New(5 * time.Second) }
