package support

// telemetryFields is what pilot/networking/telemetry reads of Telemetry
// (sidecar and gateway listeners; not proxyless gRPC).
func telemetryFields() []Field {
	providers := "by name in the mesh's extensionProviders (case-insensitive), plus the built-in prometheus and envoy (file access log to /dev/stdout)"
	return []Field{
		{"spec.selector", Supported, "root namespace-wide, then namespace-wide, then the first selecting one of the namespace, as Istio"},
		{"spec.targetRef", Partial, "kind Gateway only: the pods labelled gateway.networking.k8s.io/gateway-name=NAME; other kinds (Service, waypoints) select nothing"},
		{"spec.targetRefs", Partial, "kind Gateway only: the pods labelled gateway.networking.k8s.io/gateway-name=NAME; other kinds (Service, waypoints) select nothing"},
		{"spec.metrics", Supported, "Istio's stats filter (istio.stats, stats.PluginConfig) on HTTP managers and before tcp_proxy; merged over defaultProviders.metrics as Istio"},
		{"spec.metrics[].providers", Partial, "prometheus providers only (" + providers + "); others are warned"},
		{"spec.metrics[].overrides", Supported, "per mode (CLIENT: outbound and gateways, SERVER: inbound), later overrides win; ALL_METRICS disabled drops the filter"},
		{"spec.metrics[].overrides[].match", Supported, "Istio metric or customMetric, mode"},
		{"spec.metrics[].overrides[].disabled", Supported, "MetricConfig.drop"},
		{"spec.metrics[].overrides[].tagOverrides", Supported, "UPSERT: dimensions, REMOVE: tags_to_remove"},
		{"spec.metrics[].reportingInterval", Supported, "tcp_reporting_duration"},
		{"spec.accessLogging", Supported, "access logs on HTTP managers and tcp_proxy (none to BlackHoleCluster); merged over defaultProviders.accessLogging as Istio; without either, MeshConfig accessLogFile applies"},
		{"spec.accessLogging[].providers", Partial, "envoyFileAccessLog (text, labels as JSON, omitEmptyValues), envoyOtelAls (gRPC; text body, labels as attributes), envoyHttpAls (HTTP managers only) and envoyTcpAls (tcp_proxy only); " + providers},
		{"spec.accessLogging[].match", Supported, "mode CLIENT, SERVER, CLIENT_AND_SERVER"},
		{"spec.accessLogging[].disabled", Supported, ""},
		{"spec.accessLogging[].filter", Supported, "CEL expression filter (envoy.access_loggers.extension_filters.cel)"},
		{"spec.tracing", Supported, "HCM tracing per mode; without Telemetry tracing or defaultProviders.tracing, enableTracing gives istiod's legacy tracing (sampling, tags; tracer from the bootstrap)"},
		{"spec.tracing[].match", Supported, ""},
		{"spec.tracing[].providers", Supported, "the first: zipkin, opentelemetry (gRPC or HTTP with its headers; environment and dynatrace resource detectors, Dynatrace sampler), datadog, skywalking, sending to outbound|PORT||HOST"},
		{"spec.tracing[].randomSamplingPercentage", Supported, ""},
		{"spec.tracing[].disableSpanReporting", Supported, ""},
		{"spec.tracing[].customTags", Supported, "literal, environment, header, formatter (Envoy value tags)"},
		{"spec.tracing[].useRequestIdForTraceSampling", Supported, ""},
		{"spec.tracing[].enableIstioTags", Supported, ""},
		{"spec.tracing[].disableContextPropagation", Supported, ""},
	}
}
