package bootstrap

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	networkingv1beta1 "istio.io/api/networking/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	caserver "github.com/meshpilot/meshpilot/pilot/ca/server"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
	"github.com/meshpilot/meshpilot/pilot/leaderelection"
	"github.com/meshpilot/meshpilot/pilot/webhook/inject"
	"github.com/meshpilot/meshpilot/pilot/webhook/patch"
	webhook "github.com/meshpilot/meshpilot/pilot/webhook/server"
	"github.com/meshpilot/meshpilot/pilot/webhook/validate"
)

// webhookServing is the admission webhook port (15017).
type webhookServing struct {
	validator  *validation.Validator
	metrics    *validate.Metrics
	httpErrors *prometheus.CounterVec
	injection  *inject.Metrics
	server     *webhook.Server // nil until started
	lis        net.Listener
}

// newWebhookServing builds what does not need the CA yet: the metrics,
// and the validator shared with the file source.
func (s *Server) newWebhookServing(v *validation.Validator) *webhookServing {
	return &webhookServing{validator: v, metrics: validate.NewMetrics(s.reg), httpErrors: webhook.NewValidationHTTPErrors(s.reg),
		injection: inject.NewMetrics(s.reg)}
}

// startWebhook serves /validate and /inject on lis with serving, the CA's
// certificate of the secure port (same names, same renewal). Readiness
// waits until the server completed a verified TLS handshake with itself.
// With Kubernetes, the leader patches the webhook configurations
// (startWebhookPatcher).
func (s *Server) startWebhook(ctx context.Context, lis net.Listener, serving *caserver.ServingCert) {
	wh := s.webhook
	log := s.log.With("component", "webhook")
	wh.server = webhook.New(webhook.Options{
		TLS: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: serving.GetCertificate},
		Validator: validate.New(validate.Options{
			Validator: wh.validator, View: webhookView{s}, Metrics: wh.metrics, Log: log,
		}),
		Injector:             s.injectWebhook(log),
		ProbeRoots:           s.secure.authority.Bundle().RootPool(),
		ProbeServerName:      webhookService + "." + s.opts.Namespace + ".svc",
		ValidationHTTPErrors: wh.httpErrors,
		Log:                  log,
	})
	wh.lis = lis
	s.goServe("webhook", func() error { return wh.server.Serve(ctx, lis) })
	if elector := s.LeaderElector(); elector != nil {
		s.startWebhookPatcher(ctx, elector)
	}
}

// startWebhookPatcher runs the webhook patcher while this replica leads
// istiod's webhook Lease: it keeps caBundle of the chart's two webhook
// configurations equal to the CA root, and sets the validation webhook's
// failurePolicy to Fail once the webhook server serves.
func (s *Server) startWebhookPatcher(ctx context.Context, elector *leaderelection.Elector) {
	injection, validation := webhookConfigurationNames(s.opts.Revision, s.opts.Namespace)
	patcher := patch.New(patch.Options{
		Client:           s.KubeClient(),
		InjectionName:    injection,
		ValidationName:   validation,
		ServiceName:      webhookService,
		ServiceNamespace: s.opts.Namespace,
		Root:             func() []byte { return s.secure.authority.Bundle().RootPEM },
		Changes:          s.secure.authority.Subscribe(),
		Log:              s.log, // the patcher adds component=webhook-patcher
	})
	s.goServe("webhook-serving", func() error {
		if err := s.webhook.server.WaitServing(ctx); err != nil {
			return fmt.Errorf("waiting for the webhook to serve: %w", err)
		}
		patcher.MarkServing()
		return nil
	})
	s.goServe("webhook-patcher", func() error {
		return elector.Run(ctx, validationControllerLease, func(lctx context.Context) {
			if err := patcher.Run(lctx); err != nil {
				s.log.Error("webhook patcher stopped", "component", "webhook-patcher", "error", err)
			}
		})
	})
}

// webhookService is the Service in front of the webhook port, as the chart
// renders it (and as istiod's certificate names it).
const webhookService = "istiod"

// webhookConfigurationNames are the chart's webhook configurations of a
// revision ("" is the default one) installed in namespace, as Istio names
// them: istio-sidecar-injector[-REVISION], istio-validator[-REVISION]-NAMESPACE.
func webhookConfigurationNames(revision, namespace string) (injection, validation string) {
	suffix := ""
	if revision != "" {
		suffix = "-" + revision
	}
	return "istio-sidecar-injector" + suffix, "istio-validator" + suffix + "-" + namespace
}

// injectWebhook is /inject's injector: the istio-sidecar-injector
// ConfigMap's configuration (watched) with the current mesh config. Without
// a cluster there is no ConfigMap, and /inject admits pods unchanged. The
// injector selects this control plane's revision (REVISION).
func (s *Server) injectWebhook(log *slog.Logger) webhook.Injector {
	if s.kube == nil || s.kube.injector == nil {
		return nil
	}
	native := func() bool { return false }
	if s.opts.NativeSidecars {
		native = s.kube.registry.NodesSupportNativeSidecars
	}
	return &inject.Webhook{
		Config: s.kube.injector.Config, Mesh: s.env.MeshConfig, Revision: s.opts.Revision,
		NativeSidecars: native, Metrics: s.webhook.injection, Log: log.With("webhook", "inject"),
		ProxyConfigs: func(namespace string, labels map[string]string) []*networkingv1beta1.ProxyConfig {
			return s.discovery.PushContext().ProxyConfigs().For(namespace, labels)
		},
	}
}

// validationControllerLease is the Lease istiod's webhook patcher holds;
// the same name keeps a meshpilot and an istiod replica from both writing
// the webhook configurations during a migration.
const validationControllerLease = "istio-validation-controller-election"

// webhookServing reports whether the webhook is off or serves; /ready waits for it.
func (s *Server) webhookServing() bool {
	return s.webhook == nil || (s.webhook.server != nil && s.webhook.server.Serving())
}

// HTTPSListenAddr is the bound webhook port; empty when it is off.
func (s *Server) HTTPSListenAddr() string {
	if s.webhook == nil || s.webhook.lis == nil {
		return ""
	}
	return s.webhook.lis.Addr().String()
}

// webhookView is the validate.View of the running server.
type webhookView struct{ s *Server }

func (v webhookView) PushContext() *model.PushContext {
	if !v.s.discovery.Ready() {
		return nil
	}
	return v.s.discovery.PushContext()
}

// WorkloadSelected looks at the endpoints of every service (pods behind
// services, WorkloadEntries) and, with Kubernetes, every watched pod.
func (v webhookView) WorkloadSelected(selector map[string]string) (selected, known bool) {
	pc := v.PushContext()
	if pc == nil {
		return false, false
	}
	if v.s.kube != nil && v.s.kube.registry.AnyPodSelected(selector) {
		return true, true
	}
	for _, svc := range pc.Services() {
		for _, ep := range pc.Endpoints.Endpoints(svc.Hostname) {
			if labelsInclude(ep.Labels, selector) {
				return true, true
			}
		}
	}
	return false, true
}

func labelsInclude(labels, selector map[string]string) bool {
	for k, want := range selector {
		if got, ok := labels[k]; !ok || got != want {
			return false
		}
	}
	return true
}
