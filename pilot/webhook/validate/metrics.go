package validate

import (
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
)

// Reasons of galley_validation_failed, Istio's.
const (
	ReasonUnsupportedOperation = "unsupported_operation"
	ReasonDecodeError          = "yaml_decode_error"
	ReasonUnknownType          = "unknown_type"
	ReasonInvalid              = "invalid_resource"
)

// Metrics are Istio's validation counters, labelled with the request's
// resource (group, version, resource) and, for failures, the reason.
type Metrics struct {
	Passed *prometheus.CounterVec
	Failed *prometheus.CounterVec
}

// NewMetrics registers galley_validation_passed and
// galley_validation_failed on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Passed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galley_validation_passed", Help: "Resource is valid",
		}, []string{"group", "version", "resource"}),
		Failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galley_validation_failed", Help: "Resource validation failed",
		}, []string{"group", "version", "resource", "reason"}),
	}
	reg.MustRegister(m.Passed, m.Failed)
	return m
}

func (m *Metrics) passed(req *admissionv1.AdmissionRequest) {
	if m != nil {
		m.Passed.WithLabelValues(req.Resource.Group, req.Resource.Version, req.Resource.Resource).Inc()
	}
}

func (m *Metrics) failed(req *admissionv1.AdmissionRequest, reason string) {
	if m != nil {
		m.Failed.WithLabelValues(req.Resource.Group, req.Resource.Version, req.Resource.Resource, reason).Inc()
	}
}
