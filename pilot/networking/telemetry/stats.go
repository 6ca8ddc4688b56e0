package telemetry

import (
	"slices"
	"sort"

	"google.golang.org/protobuf/types/known/durationpb"
	stats "istio.io/api/envoy/extensions/stats"
	meshconfig "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"
)

// prometheusMetric maps the Telemetry API's metric names to the names the
// stats filter knows (Istio's istio_* metrics without the prefix); a
// custom metric name is passed as is.
var prometheusMetric = map[string]string{
	"REQUEST_COUNT":          "requests_total",
	"REQUEST_DURATION":       "request_duration_milliseconds",
	"REQUEST_SIZE":           "request_bytes",
	"RESPONSE_SIZE":          "response_bytes",
	"TCP_OPENED_CONNECTIONS": "tcp_connections_opened_total",
	"TCP_CLOSED_CONNECTIONS": "tcp_connections_closed_total",
	"TCP_SENT_BYTES":         "tcp_sent_bytes_total",
	"TCP_RECEIVED_BYTES":     "tcp_received_bytes_total",
	"GRPC_REQUEST_MESSAGES":  "request_messages_total",
	"GRPC_RESPONSE_MESSAGES": "response_messages_total",
}

// allMetrics are the Telemetry API's metric names but ALL_METRICS, sorted.
func allMetrics() []string {
	out := make([]string, 0, len(tpb.MetricSelector_IstioMetric_value))
	for k := range tpb.MetricSelector_IstioMetric_value {
		if k != tpb.MetricSelector_ALL_METRICS.String() {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// metricOverride is the merged override of one metric in one mode.
type metricOverride struct {
	drop *bool
	// tags: name → value to upsert, or remove (remove true).
	tags map[string]tagOverride
}

type tagOverride struct {
	value  string
	remove bool
}

// metricsConfig is the merged metrics configuration of one provider.
type metricsConfig struct {
	// byMode[mode][metric]; mode CLIENT or SERVER.
	byMode            map[tpb.WorkloadMode]map[string]metricOverride
	reportingInterval *durationpb.Duration
}

// mergeMetrics merges the metrics sections of the applied Telemetry specs
// (widest first) over the mesh's default providers, the way Istio does: a
// level that names providers replaces the set; overrides apply in order,
// later ones winning per field; disabling ALL_METRICS drops a provider's
// filter unless a later override enables metrics again. The result is by
// provider name.
func mergeMetrics(specs []*tpb.Telemetry, mesh *meshconfig.MeshConfig) map[string]*metricsConfig {
	var metrics []*tpb.Metrics
	for _, s := range specs {
		metrics = append(metrics, s.GetMetrics()...)
	}
	defaults := mesh.GetDefaultProviders().GetMetrics()
	out := map[string]*metricsConfig{}
	newConfig := func() *metricsConfig {
		return &metricsConfig{byMode: map[tpb.WorkloadMode]map[string]metricOverride{
			tpb.WorkloadMode_CLIENT: {}, tpb.WorkloadMode_SERVER: {},
		}}
	}
	if len(metrics) == 0 {
		for _, p := range defaults {
			out[p] = newConfig()
		}
		return out
	}
	inScope := defaults
	for _, m := range metrics {
		if names := providerNames(m.GetProviders()); len(names) > 0 {
			inScope = names
		}
	}
	parent := defaults
	disabledAll := map[string]bool{}
	for _, m := range metrics {
		names := providerNames(m.GetProviders())
		if len(names) == 0 {
			names = parent
		}
		parent = names
		for _, p := range names {
			if !slices.Contains(inScope, p) {
				continue
			}
			cfg, ok := out[p]
			if !ok {
				cfg = newConfig()
				out[p] = cfg
			}
			if m.GetReportingInterval() != nil {
				cfg.reportingInterval = m.GetReportingInterval()
			}
			for _, o := range m.GetOverrides() {
				if isAllMetrics(o.GetMatch()) && o.GetDisabled().GetValue() {
					disabledAll[p] = true
					continue
				}
				delete(disabledAll, p)
				for _, mode := range modes(o.GetMatch().GetMode()) {
					for _, name := range matches(o.GetMatch()) {
						mo := cfg.byMode[mode][name]
						if o.GetDisabled() != nil {
							d := o.GetDisabled().GetValue()
							mo.drop = &d
						}
						for k, v := range o.GetTagOverrides() {
							if mo.tags == nil {
								mo.tags = map[string]tagOverride{}
							}
							mo.tags[k] = tagOverride{value: v.GetValue(), remove: v.GetOperation() == tpb.MetricsOverrides_TagOverride_REMOVE}
						}
						cfg.byMode[mode][name] = mo
					}
				}
			}
		}
	}
	for p := range disabledAll {
		delete(out, p)
	}
	return out
}

func providerNames(refs []*tpb.ProviderRef) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.GetName())
	}
	return out
}

func modes(m tpb.WorkloadMode) []tpb.WorkloadMode {
	if m == tpb.WorkloadMode_CLIENT || m == tpb.WorkloadMode_SERVER {
		return []tpb.WorkloadMode{m}
	}
	return []tpb.WorkloadMode{tpb.WorkloadMode_CLIENT, tpb.WorkloadMode_SERVER}
}

func isAllMetrics(s *tpb.MetricSelector) bool {
	m, ok := s.GetMetricMatch().(*tpb.MetricSelector_Metric)
	return ok && m.Metric == tpb.MetricSelector_ALL_METRICS
}

func matches(s *tpb.MetricSelector) []string {
	switch m := s.GetMetricMatch().(type) {
	case *tpb.MetricSelector_CustomMetric:
		return []string{m.CustomMetric}
	case *tpb.MetricSelector_Metric:
		if m.Metric != tpb.MetricSelector_ALL_METRICS {
			return []string{m.Metric.String()}
		}
	}
	return allMetrics()
}

// workloadMode is the Telemetry mode of a listener class: the inbound side
// is the server, the outbound side and gateways are clients.
func workloadMode(c Class) tpb.WorkloadMode {
	if c == SidecarInbound {
		return tpb.WorkloadMode_SERVER
	}
	return tpb.WorkloadMode_CLIENT
}

// statsConfig is Istio's stats.PluginConfig for class under cfg: host
// header fallback off on the inbound side and gateways, the reporting
// interval, and one MetricConfig per overridden metric (sorted by name)
// with its dimensions to upsert, tags to remove and drop.
func statsConfig(c Class, cfg *metricsConfig) *stats.PluginConfig {
	pc := &stats.PluginConfig{
		DisableHostHeaderFallback: c == SidecarInbound || c == Gateway,
		TcpReportingDuration:      cfg.reportingInterval,
	}
	overrides := cfg.byMode[workloadMode(c)]
	names := make([]string, 0, len(overrides))
	for n := range overrides {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		o := overrides[n]
		name, ok := prometheusMetric[n]
		if !ok {
			name = n
		}
		mc := &stats.MetricConfig{Name: name, Dimensions: map[string]string{}}
		if o.drop != nil {
			mc.Drop = *o.drop
		}
		tags := make([]string, 0, len(o.tags))
		for t := range o.tags {
			tags = append(tags, t)
		}
		sort.Strings(tags)
		for _, t := range tags {
			if o.tags[t].remove {
				mc.TagsToRemove = append(mc.TagsToRemove, t)
			} else {
				mc.Dimensions[t] = o.tags[t].value
			}
		}
		pc.Metrics = append(pc.Metrics, mc)
	}
	return pc
}
