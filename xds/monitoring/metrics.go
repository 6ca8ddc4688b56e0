// Package monitoring defines the control plane's Prometheus metrics under
// Istio's names, so existing Istio dashboards and alerts keep working.
package monitoring

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds every xDS and push metric. Create one per server with New;
// nothing is registered globally.
type Metrics struct {
	// XDSClients is pilot_xds: connected xDS clients by proxy version.
	XDSClients *prometheus.GaugeVec
	// Pushes is pilot_xds_pushes: responses sent, by type (cds, eds, lds, rds, sds, and *_senderr).
	Pushes *prometheus.CounterVec
	// ConvergenceTime is pilot_proxy_convergence_time: from the first change
	// of a push request to the response being sent to one proxy.
	ConvergenceTime prometheus.Histogram
	// PushTriggers is pilot_push_triggers: pushes by trigger reason (label type).
	PushTriggers *prometheus.CounterVec
	// DebounceTime is pilot_debounce_time: time from the first change to the end of debouncing.
	DebounceTime prometheus.Histogram
	// PushContextInitTime is pilot_pushcontext_init_seconds: PushContext builds.
	PushContextInitTime prometheus.Histogram
	// TotalRejects is pilot_total_xds_rejects: NACKs by type.
	TotalRejects *prometheus.CounterVec
	// Rejects holds pilot_xds_cds_reject, pilot_xds_eds_reject,
	// pilot_xds_lds_reject and pilot_xds_rds_reject, keyed by short type.
	Rejects map[string]prometheus.Counter
	// ExpiredNonce is pilot_xds_expired_nonce: requests with a stale nonce, by type.
	ExpiredNonce *prometheus.CounterVec
	// Services is pilot_services: services in the current PushContext.
	Services prometheus.Gauge
	// PushTime is pilot_xds_push_time: time to generate and send one type to one proxy.
	PushTime *prometheus.HistogramVec
	// SendTime is pilot_xds_send_time: time to send one response.
	SendTime prometheus.Histogram
	// ConfigSize is pilot_xds_config_size_bytes: response size by type.
	ConfigSize *prometheus.HistogramVec
	// InboundUpdates is pilot_inbound_updates: changes received from sources, by type.
	InboundUpdates *prometheus.CounterVec
	// PushQueueTime is pilot_proxy_queue_time: time a proxy's push waited
	// for a generation slot (PILOT_PUSH_THROTTLE).
	PushQueueTime prometheus.Histogram
	// WriteTimeouts is pilot_xds_write_timeout: streams ended because a
	// send blocked longer than PILOT_XDS_SEND_TIMEOUT.
	WriteTimeouts prometheus.Counter
	// UnansweredBytes is meshpilot_xds_unanswered_bytes: bytes of responses
	// handed to gRPC whose client has not answered them yet, at most one
	// response per type and connection (no Istio equivalent).
	UnansweredBytes prometheus.Gauge
	// XDSCacheReads is pilot_xds_cache_reads: resource cache lookups by type (hit, miss).
	XDSCacheReads *prometheus.CounterVec
	// XDSCacheSize is pilot_xds_cache_size: entries in the resource cache.
	XDSCacheSize prometheus.Gauge
	// ConfigErrors is meshpilot_config_errors: documents rejected by config sources (no Istio equivalent).
	ConfigErrors prometheus.Gauge
	// UnsupportedFields is meshpilot_config_unsupported_fields{source}: fields
	// set in the current config that meshpilot does not (or only partly)
	// carry out, per config source ("file", "kubernetes"); no Istio equivalent.
	UnsupportedFields *prometheus.GaugeVec
	// EnvoyFilterStatus is pilot_envoy_filter_status{name, status}: 1 once
	// a patch of EnvoyFilter name ("namespace/name") was applied
	// (status "applied") or skipped because it could not be (status "error").
	EnvoyFilterStatus *prometheus.GaugeVec
	// ConfigPropagation is meshpilot_config_propagation_seconds: from a
	// config change entering the server (the push request's start) to the
	// last proxy it reached ACKing it (docs/status.md; no Istio equivalent).
	ConfigPropagation prometheus.Histogram
	// ConfigRejected is meshpilot_config_rejected{kind,namespace,name}:
	// proxies currently rejecting (NACKing) an object's latest change; the
	// series is deleted when none does or the object goes.
	ConfigRejected *prometheus.GaugeVec
}

// convergenceBuckets are Istio's buckets for pilot_proxy_convergence_time.
var convergenceBuckets = []float64{.1, .5, 1, 3, 5, 10, 20, 30}

// New creates the metrics and registers them, plus the Go and process
// collectors, on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		XDSClients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilot_xds", Help: "Number of endpoints connected to this pilot using XDS.",
		}, []string{"version"}),
		Pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_xds_pushes", Help: "Pilot build and send errors for lds, rds, cds and eds.",
		}, []string{"type"}),
		ConvergenceTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_proxy_convergence_time", Help: "Delay in seconds between config change and a proxy receiving all required configuration.",
			Buckets: convergenceBuckets,
		}),
		PushTriggers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_push_triggers", Help: "Total number of times a push was triggered, labeled by reason for the push.",
		}, []string{"type"}),
		DebounceTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_debounce_time", Help: "Delay in seconds between the first config enters debouncing and the merged push request is pushed into the push queue.",
			Buckets: []float64{.01, .1, 1, 3, 5, 10, 20, 30},
		}),
		PushContextInitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_pushcontext_init_seconds", Help: "Total time in seconds Pilot takes to init pushContext.",
			Buckets: []float64{.001, .01, .1, .5, 1, 3, 5},
		}),
		TotalRejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_total_xds_rejects", Help: "Total number of XDS responses from pilot rejected by proxy.",
		}, []string{"type"}),
		Rejects: map[string]prometheus.Counter{},
		ExpiredNonce: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_xds_expired_nonce", Help: "Total number of XDS requests with an expired nonce.",
		}, []string{"type"}),
		Services: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilot_services", Help: "Total services known to pilot.",
		}),
		PushTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pilot_xds_push_time", Help: "Total time in seconds Pilot takes to push lds, rds, cds and eds.",
			Buckets: []float64{.01, .1, 1, 3, 5, 10, 20, 30},
		}, []string{"type"}),
		SendTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_xds_send_time", Help: "Total time in seconds Pilot takes to send generated configuration.",
			Buckets: []float64{.01, .1, 1, 3, 5, 10, 20, 30},
		}),
		ConfigSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pilot_xds_config_size_bytes", Help: "Distribution of configuration sizes pushed to clients",
			Buckets: []float64{1, 10000, 1000000, 4000000, 10000000, 40000000},
		}, []string{"type"}),
		InboundUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_inbound_updates", Help: "Total number of updates received by pilot.",
		}, []string{"type"}),
		PushQueueTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_proxy_queue_time", Help: "Time in seconds, a proxy is in the push queue before being dequeued.",
			Buckets: []float64{.1, .5, 1, 3, 5, 10, 20, 30},
		}),
		WriteTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilot_xds_write_timeout", Help: "Pilot XDS response write timeouts.",
		}),
		UnansweredBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshpilot_xds_unanswered_bytes",
			Help: "Bytes of xDS responses sent and not yet ACKed or NACKed (at most one response per type and connection).",
		}),
		XDSCacheReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_xds_cache_reads", Help: "Total number of xds cache xdsCacheReads.",
		}, []string{"type"}),
		XDSCacheSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilot_xds_cache_size", Help: "Current size of xds cache",
		}),
		ConfigErrors: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshpilot_config_errors", Help: "Configuration documents currently rejected by a config source.",
		}),
		UnsupportedFields: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshpilot_config_unsupported_fields",
			Help: "Fields set in the current configuration that meshpilot does not or only partly support (docs/istio-api-support.md).",
		}, []string{"source"}),
		EnvoyFilterStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilot_envoy_filter_status", Help: "Status of Envoy filters whether it was applied or errored.",
		}, []string{"name", "status"}),
		ConfigPropagation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshpilot_config_propagation_seconds",
			Help:    "Time from a config change entering the server to the last affected proxy ACKing it.",
			Buckets: convergenceBuckets,
		}),
		ConfigRejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshpilot_config_rejected", Help: "Proxies currently rejecting the latest change of a config object.",
		}, []string{"kind", "namespace", "name"}),
	}
	for _, t := range []string{"cds", "eds", "lds", "rds"} {
		m.Rejects[t] = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilot_xds_" + t + "_reject", Help: "Pilot rejected " + t + " configs.",
		})
	}
	reg.MustRegister(m.XDSClients, m.Pushes, m.ConvergenceTime, m.PushTriggers, m.DebounceTime,
		m.PushContextInitTime, m.TotalRejects, m.ExpiredNonce, m.Services, m.PushTime, m.SendTime,
		m.ConfigSize, m.InboundUpdates, m.PushQueueTime, m.WriteTimeouts, m.UnansweredBytes, m.ConfigErrors, m.UnsupportedFields, m.XDSCacheReads, m.XDSCacheSize,
		m.EnvoyFilterStatus, m.ConfigPropagation, m.ConfigRejected,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range m.Rejects {
		reg.MustRegister(c)
	}
	return m
}

// RecordReject counts a NACK of the given short type ("cds", "eds", ...).
func (m *Metrics) RecordReject(shortType string) {
	m.TotalRejects.WithLabelValues(shortType).Inc()
	if c, ok := m.Rejects[shortType]; ok {
		c.Inc()
	}
}

// RecordEnvoyFilterStatus sets pilot_envoy_filter_status for an EnvoyFilter
// ("namespace/name") and status ("applied" or "error").
func (m *Metrics) RecordEnvoyFilterStatus(name, status string) {
	m.EnvoyFilterStatus.WithLabelValues(name, status).Set(1)
}

// ObservePropagation records one object's propagation time (configstatus.Metrics).
func (m *Metrics) ObservePropagation(seconds float64) { m.ConfigPropagation.Observe(seconds) }

// SetRejected sets meshpilot_config_rejected of an object; 0 deletes the
// series, bounding cardinality to the objects being rejected (configstatus.Metrics).
func (m *Metrics) SetRejected(kind, namespace, name string, n int) {
	if n <= 0 {
		m.ConfigRejected.DeleteLabelValues(kind, namespace, name)
		return
	}
	m.ConfigRejected.WithLabelValues(kind, namespace, name).Set(float64(n))
}
