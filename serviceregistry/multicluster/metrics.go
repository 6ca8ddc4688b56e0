package multicluster

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Sync states of a remote cluster, the status label values of
// istiod_remote_cluster_sync_status (Istio's).
const (
	StatusSyncing = "syncing"
	StatusSynced  = "synced"
	StatusTimeout = "timeout"
)

var statuses = [...]string{StatusSyncing, StatusSynced, StatusTimeout}

// Metrics are Istio's multicluster metrics.
type Metrics struct {
	// managed is istiod_managed_clusters{cluster_type="local"|"remote"}.
	managed *prometheus.GaugeVec
	// syncStatus is istiod_remote_cluster_sync_status{cluster, cluster_type,
	// status}: 1 for the state a remote cluster is in, 0 for the others.
	syncStatus *prometheus.GaugeVec
	// timeouts is remote_cluster_sync_timeouts_total.
	timeouts prometheus.Counter
}

// NewMetrics registers the metrics with reg, counting the local cluster.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		managed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "istiod_managed_clusters", Help: "Number of clusters managed by istiod",
		}, []string{"cluster_type"}),
		syncStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "istiod_remote_cluster_sync_status",
			Help: "Current synchronization state of remote clusters managed by istiod. One sample per cluster and state; a value of 1 indicates the cluster is in that state.",
		}, []string{"cluster", "cluster_type", "status"}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "remote_cluster_sync_timeouts_total",
			Help: "Number of times remote clusters took too long to sync, causing slow startup that excludes remote clusters.",
		}),
	}
	reg.MustRegister(m.managed, m.syncStatus, m.timeouts)
	m.managed.WithLabelValues("local").Set(1)
	m.managed.WithLabelValues("remote").Set(0)
	return m
}

func (m *Metrics) setRemote(n int) {
	if m != nil {
		m.managed.WithLabelValues("remote").Set(float64(n))
	}
}

func (m *Metrics) setStatus(cluster, status string) {
	if m == nil {
		return
	}
	for _, s := range statuses {
		v := 0.0
		if s == status {
			v = 1
		}
		m.syncStatus.WithLabelValues(cluster, "remote", s).Set(v)
	}
}

func (m *Metrics) forget(cluster string) {
	if m == nil {
		return
	}
	for _, s := range statuses {
		m.syncStatus.DeleteLabelValues(cluster, "remote", s)
	}
}

func (m *Metrics) timedOut() {
	if m != nil {
		m.timeouts.Inc()
	}
}
