package inject

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pilot/webhook/server"
)

// Metrics are Istio's sidecar injection counters, so existing dashboards work.
type Metrics struct {
	requests, success, skip, failure prometheus.Counter
}

// NewMetrics registers the counters on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	c := func(name, help string) prometheus.Counter {
		m := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(m)
		return m
	}
	return &Metrics{
		requests: c("sidecar_injection_requests_total", "Total number of sidecar injection requests."),
		success:  c("sidecar_injection_success_total", "Total number of successful sidecar injection requests."),
		skip:     c("sidecar_injection_skip_total", "Total number of skipped sidecar injection requests."),
		failure:  c("sidecar_injection_failure_total", "Total number of failed sidecar injection requests."),
	}
}

// Webhook answers the admission server's /inject with an Injector built
// from the current configuration and mesh config for each request (New is
// a few field assignments), so a ConfigMap or mesh change applies to the
// next pod without a restart.
type Webhook struct {
	// Config returns the current configuration; nil (none loaded yet)
	// admits pods unchanged, counted as skipped.
	Config func() *Config
	// Mesh returns the current mesh config; nil means Istio's defaults.
	Mesh func() *meshconfig.MeshConfig
	// Revision is the control plane's revision ("" for the default one).
	Revision string
	// NativeSidecars reports whether istio-proxy is injected as a native
	// sidecar (the pod's sidecar.istio.io/nativeSidecar annotation still
	// wins); nil means no.
	NativeSidecars func() bool
	// ProxyConfigs returns the ProxyConfig objects that apply to a pod of
	// namespace with labels, lowest precedence first; nil means none.
	ProxyConfigs func(namespace string, labels map[string]string) []*networkingv1beta1.ProxyConfig
	// MaxContainers is Injector.MaxContainers (0: DefaultMaxContainers).
	MaxContainers int
	Metrics       *Metrics
	Log           *slog.Logger
}

var _ server.Injector = (*Webhook)(nil)

// Inject implements server.Injector. The namespace is not looked up: the
// API server already applied the webhook's namespace and object selectors,
// and Admit then makes the injector's own decision (policy, never/always
// selectors, hostNetwork), as Istio's webhook does.
func (w *Webhook) Inject(ctx context.Context, req *admissionv1.AdmissionRequest, params server.InjectParams) *admissionv1.AdmissionResponse {
	config := w.Config()
	if config == nil {
		w.Metrics.record(skipped)
		if w.Log != nil {
			w.Log.Warn("no injector configuration loaded: admitting the pod unchanged", "uid", string(req.UID), "namespace", req.Namespace)
		}
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	}
	var mesh *meshconfig.MeshConfig
	if w.Mesh != nil {
		mesh = w.Mesh()
	}
	inj := New(config, mesh, w.Revision)
	inj.NativeSidecars = w.NativeSidecars != nil && w.NativeSidecars()
	inj.MaxContainers = w.MaxContainers
	resp := inj.AdmitContext(ctx, req, Options{ProxyEnvs: params.Env, ProxyConfigs: w.ProxyConfigs})
	switch {
	case resp.Result != nil && resp.Result.Status == metav1.StatusFailure:
		w.Metrics.record(failed)
		if w.Log != nil {
			w.Log.Error("sidecar injection failed", "uid", string(req.UID), "namespace", req.Namespace, "error", resp.Result.Message)
		}
	case len(resp.Patch) == 0:
		w.Metrics.record(skipped)
	default:
		w.Metrics.record(injected)
	}
	return resp
}

// outcome is what one /inject request came to.
type outcome int

const (
	skipped outcome = iota
	injected
	failed
)

// record counts one request; a nil Metrics counts nothing.
func (m *Metrics) record(o outcome) {
	if m == nil {
		return
	}
	m.requests.Inc()
	switch o {
	case skipped:
		m.skip.Inc()
	case injected:
		m.success.Inc()
	case failed:
		m.failure.Inc()
	}
}
