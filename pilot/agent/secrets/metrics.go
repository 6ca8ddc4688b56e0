package secrets

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// requestTypeCSR is Istio's request_type label value for CA calls.
const requestTypeCSR = "csr"

// metrics are Istio's agent metrics for certificates, by Istio's names
// (security/pkg/nodeagent/cache/monitoring.go and secretcache.go). A nil
// *metrics records nothing.
type metrics struct {
	outgoingLatency prometheus.Counter // outgoing_latency{request_type="csr"}, milliseconds
	outgoing        prometheus.Counter // num_outgoing_requests{request_type="csr"}
	failed          prometheus.Counter // num_failed_outgoing_requests{request_type="csr"}
	watchFailures   prometheus.Counter // num_file_watcher_failures
	fileFailures    prometheus.Counter // num_file_secret_failures
}

// newMetrics creates the metrics, plus the gauge cert_expiry_seconds
// {resource_name="default"} read from m, and registers them on reg.
func newMetrics(reg prometheus.Registerer, m *Manager) (*metrics, error) {
	csr := prometheus.Labels{"request_type": requestTypeCSR}
	mt := &metrics{
		outgoingLatency: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outgoing_latency", ConstLabels: csr,
			Help: "The latency of outgoing requests (e.g. to a token exchange server, CA, etc.) in milliseconds.",
		}),
		outgoing: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "num_outgoing_requests", ConstLabels: csr,
			Help: "Number of total outgoing requests (e.g. to a token exchange server, CA, etc.)",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "num_failed_outgoing_requests", ConstLabels: csr,
			Help: "Number of failed outgoing requests (e.g. to a token exchange server, CA, etc.)",
		}),
		watchFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "num_file_watcher_failures", Help: "Number of times the file watcher failed to add watchers",
		}),
		fileFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "num_file_secret_failures", Help: "Number of times secret generation failed for files",
		}),
	}
	expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cert_expiry_seconds", ConstLabels: prometheus.Labels{"resource_name": WorkloadName},
		Help: "The time remaining, in seconds, before the certificate chain will expire. A negative value indicates the cert is expired.",
	}, func() float64 {
		if it := m.current(); it != nil {
			return time.Until(it.NotAfter).Seconds()
		}
		return 0
	})
	for _, c := range []prometheus.Collector{mt.outgoingLatency, mt.outgoing, mt.failed, mt.watchFailures, mt.fileFailures, expiry} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("secrets: register metrics: %w", err)
		}
	}
	return mt, nil
}

func (mt *metrics) request() {
	if mt != nil {
		mt.outgoing.Inc()
	}
}

func (mt *metrics) latency(d time.Duration) {
	if mt != nil {
		mt.outgoingLatency.Add(float64(d) / float64(time.Millisecond))
	}
}

func (mt *metrics) failure() {
	if mt != nil {
		mt.failed.Inc()
	}
}

func (mt *metrics) watchFailure() {
	if mt != nil {
		mt.watchFailures.Inc()
	}
}

func (mt *metrics) fileFailure() {
	if mt != nil {
		mt.fileFailures.Inc()
	}
}
