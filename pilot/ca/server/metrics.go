package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Istio's error_type values for citadel_server_csr_sign_err_count.
const (
	signErrCSR      = "CSR_ERROR"
	signErrTTL      = "TTL_ERROR"
	signErrCertGen  = "CERT_GEN_ERROR"
	signErrNotReady = "CA_NOT_READY"
)

// Metrics are the CA's metrics under Istio's citadel_server_* names, plus
// one meshpilot counter that says why each refusal happened.
type Metrics struct {
	// CSRCount is citadel_server_csr_count: CertificateService calls received.
	CSRCount prometheus.Counter
	// AuthnFailures is citadel_server_authentication_failure_count.
	AuthnFailures prometheus.Counter
	// CSRParseErrors is citadel_server_csr_parsing_err_count.
	CSRParseErrors prometheus.Counter
	// IDExtractionErrors is citadel_server_id_extraction_err_count: a CSR
	// whose identity is missing or not the caller's.
	IDExtractionErrors prometheus.Counter
	// SignErrors is citadel_server_csr_sign_err_count by error_type.
	SignErrors *prometheus.CounterVec
	// Issued is citadel_server_success_cert_issuance_count.
	Issued prometheus.Counter
	// RootExpiry is citadel_server_root_cert_expiry_timestamp (unix seconds).
	RootExpiry prometheus.Gauge
	// ChainExpiry is citadel_server_cert_chain_expiry_timestamp (unix seconds).
	ChainExpiry prometheus.Gauge
	// Rejections is meshpilot_ca_rejections_total{service,reason}: every
	// refusal on the secure port (CA calls, xDS streams, TLS handshakes) by
	// cause. Istio has no single equivalent; its counters above still move.
	Rejections *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &Metrics{
		CSRCount:           counter("citadel_server_csr_count", "The number of CSRs received by Citadel server."),
		AuthnFailures:      counter("citadel_server_authentication_failure_count", "The number of authentication failures."),
		CSRParseErrors:     counter("citadel_server_csr_parsing_err_count", "The number of errors occurred when parsing the CSR."),
		IDExtractionErrors: counter("citadel_server_id_extraction_err_count", "The number of errors occurred when extracting the ID from CSR."),
		SignErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "citadel_server_csr_sign_err_count", Help: "The number of errors occurred when signing the CSR.",
		}, []string{"error_type"}),
		Issued: counter("citadel_server_success_cert_issuance_count", "The number of certificates issuances that have succeeded."),
		RootExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "citadel_server_root_cert_expiry_timestamp", Help: "The unix timestamp, in seconds, when Citadel root cert will expire.",
		}),
		ChainExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "citadel_server_cert_chain_expiry_timestamp", Help: "The unix timestamp, in seconds, when Citadel cert chain will expire.",
		}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_ca_rejections_total", Help: "Requests refused on the secure port, by service (ca, xds, tls) and reason.",
		}, []string{"service", "reason"}),
	}
	reg.MustRegister(m.CSRCount, m.AuthnFailures, m.CSRParseErrors, m.IDExtractionErrors,
		m.SignErrors, m.Issued, m.RootExpiry, m.ChainExpiry, m.Rejections)
	return m
}

// SetExpiry records the expiry of the current root and signing chain.
func (m *Metrics) SetExpiry(root, chain time.Time) {
	m.RootExpiry.Set(float64(root.Unix()))
	m.ChainExpiry.Set(float64(chain.Unix()))
}
