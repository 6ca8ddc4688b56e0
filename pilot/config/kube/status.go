package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/timestamppb"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	extensionsv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/configstatus"
)

// Condition types the status writer sets in an object's IstioStatus.
//
// Reconciled is Istio's distribution-reporting condition: True once every
// proxy the object's last change reached has ACKed it. Istio's analysis
// reports validation as validationMessages, not a condition; objects that
// fail meshpilot's validation never reach the push (they get no status),
// so Validated is always True here: "the control plane accepted this
// generation and pushed it".
const (
	ConditionReconciled = "Reconciled"
	ConditionValidated  = "Validated"
)

// Default write rate of a StatusWriter: Istio's PILOT_STATUS_QPS is 100;
// status is a courtesy, so ours is lower and bursts stay small.
const (
	DefaultStatusQPS   = 20
	DefaultStatusBurst = 10
)

// StatusWriterOptions configure a StatusWriter.
type StatusWriterOptions struct {
	// Istio reads and writes the objects' status subresource.
	Istio istioclient.Interface
	// Status returns an object's current config status (configstatus.Tracker.Status).
	Status func(model.ConfigKey) (configstatus.ConfigStatus, bool)
	// QPS and Burst bound the API calls (a token per object handled);
	// zero takes DefaultStatusQPS and DefaultStatusBurst.
	QPS   float64
	Burst int
	Log   *slog.Logger
}

// StatusWriter writes config status to Istio objects' status field: Mark
// adds an object to a dirty set (coalescing any number of changes of one
// object into one entry) and Run drains it at a bounded rate, reading each
// object's status when it gets to it, so a burst of pushes costs at most
// one write per object per token.
type StatusWriter struct {
	opts    StatusWriterOptions
	limiter *rate.Limiter

	mu    sync.Mutex
	dirty map[model.ConfigKey]struct{}
	order []model.ConfigKey
	kick  chan struct{}
}

// NewStatusWriter returns a writer; nothing is written until Run.
func NewStatusWriter(opts StatusWriterOptions) (*StatusWriter, error) {
	if opts.Istio == nil || opts.Status == nil {
		return nil, errors.New("status writer: Istio and Status are required")
	}
	if opts.QPS <= 0 {
		opts.QPS = DefaultStatusQPS
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultStatusBurst
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &StatusWriter{
		opts: opts, limiter: rate.NewLimiter(rate.Limit(opts.QPS), opts.Burst),
		dirty: map[model.ConfigKey]struct{}{}, kick: make(chan struct{}, 1),
	}, nil
}

// Mark says key's status may have changed. It never blocks.
func (w *StatusWriter) Mark(key model.ConfigKey) {
	if statusKinds[key.Kind] == nil {
		return
	}
	w.mu.Lock()
	if _, ok := w.dirty[key]; !ok {
		w.dirty[key] = struct{}{}
		w.order = append(w.order, key)
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// next takes the oldest dirty object.
func (w *StatusWriter) next() (model.ConfigKey, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.order) == 0 {
		return model.ConfigKey{}, false
	}
	key := w.order[0]
	w.order = w.order[1:]
	delete(w.dirty, key)
	return key, true
}

// Run writes marked objects' status until ctx is done.
func (w *StatusWriter) Run(ctx context.Context) error {
	for {
		key, ok := w.next()
		if !ok {
			select {
			case <-ctx.Done():
				return nil
			case <-w.kick:
				continue
			}
		}
		if err := w.limiter.Wait(ctx); err != nil {
			return nil // ctx done
		}
		if err := w.write(ctx, key); err != nil {
			if apierrors.IsConflict(err) {
				w.Mark(key) // changed meanwhile: read it again
				continue
			}
			w.opts.Log.Warn("writing config status failed", "object", key.String(), clientlog.Error("error", err))
		}
	}
}

// write brings key's status up to date: nothing when the object is gone,
// untracked, or its status already says the same.
func (w *StatusWriter) write(ctx context.Context, key model.ConfigKey) error {
	st, ok := w.opts.Status(key)
	if !ok {
		return nil // deleted, or not pushed since this replica started
	}
	obj, err := statusKinds[key.Kind].get(ctx, w.opts.Istio, key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	if obj.generation() < st.ObservedGeneration {
		return nil // our informer is ahead of this read: the next mark writes it
	}
	cur := obj.status()
	want := desiredStatus(st, cur)
	if sameStatus(cur, want) {
		return nil
	}
	obj.setStatus(want)
	if err := obj.update(ctx); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("updating the status of %s: %w", key, err)
	}
	return nil
}

// desiredStatus is st as an IstioStatus, keeping cur's conditions of other
// types and the transition times of conditions whose status is unchanged.
func desiredStatus(st configstatus.ConfigStatus, cur *metav1alpha1.IstioStatus) *metav1alpha1.IstioStatus {
	now := timestamppb.Now()
	rec := &metav1alpha1.IstioCondition{
		Type: ConditionReconciled, Status: "False", ObservedGeneration: st.ObservedGeneration,
		Message: st.Summary(),
	}
	switch {
	case st.Rollout != nil && st.Rollout.Phase == "Halted":
		rec.Reason = "RolloutHalted"
	case st.Rollout != nil && st.Rollout.Phase == "Canary":
		rec.Reason = "RolloutCanary"
	case st.Rejected > 0:
		rec.Reason = "Rejected"
	case st.Pending > 0:
		rec.Reason = "Pending"
	default:
		rec.Status, rec.Reason = "True", "Applied"
	}
	val := &metav1alpha1.IstioCondition{
		Type: ConditionValidated, Status: "True", Reason: "Accepted", ObservedGeneration: st.ObservedGeneration,
		Message: "accepted by the control plane and pushed",
	}
	out := &metav1alpha1.IstioStatus{ObservedGeneration: st.ObservedGeneration}
	if cur != nil {
		out.ValidationMessages = cur.GetValidationMessages()
		for _, c := range cur.GetConditions() {
			if c.GetType() != ConditionReconciled && c.GetType() != ConditionValidated {
				out.Conditions = append(out.Conditions, c)
			}
		}
	}
	for _, c := range []*metav1alpha1.IstioCondition{rec, val} {
		c.LastTransitionTime = now
		if old := findCondition(cur, c.GetType()); old != nil && old.GetStatus() == c.GetStatus() && old.GetLastTransitionTime() != nil {
			c.LastTransitionTime = old.GetLastTransitionTime()
		}
		out.Conditions = append(out.Conditions, c)
	}
	return out
}

func findCondition(s *metav1alpha1.IstioStatus, typ string) *metav1alpha1.IstioCondition {
	for _, c := range s.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// sameStatus compares what the writer sets, ignoring times.
func sameStatus(cur, want *metav1alpha1.IstioStatus) bool {
	if cur.GetObservedGeneration() != want.GetObservedGeneration() || len(cur.GetConditions()) != len(want.GetConditions()) {
		return false
	}
	for _, w := range want.GetConditions() {
		c := findCondition(cur, w.GetType())
		if c == nil || c.GetStatus() != w.GetStatus() || c.GetReason() != w.GetReason() ||
			c.GetMessage() != w.GetMessage() || c.GetObservedGeneration() != w.GetObservedGeneration() {
			return false
		}
	}
	return true
}

// statusObject is one fetched object whose status can be replaced and written.
type statusObject interface {
	generation() int64
	status() *metav1alpha1.IstioStatus
	setStatus(*metav1alpha1.IstioStatus)
	update(ctx context.Context) error
}

// statusKind reads one kind's objects for the writer.
type statusKind struct {
	get func(ctx context.Context, c istioclient.Interface, ns, name string) (statusObject, error)
}

// typedStatusClient is what client-go's typed clients of Istio kinds offer.
type typedStatusClient[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*T, error)
	UpdateStatus(ctx context.Context, obj *T, opts metav1.UpdateOptions) (*T, error)
}

// typedObject adapts one typed object to statusObject.
type typedObject[T any] struct {
	obj    *T
	client typedStatusClient[T]
	meta   func(*T) *metav1.ObjectMeta
	field  func(*T) *metav1alpha1.IstioStatus
}

func (o typedObject[T]) generation() int64                     { return o.meta(o.obj).Generation }
func (o typedObject[T]) status() *metav1alpha1.IstioStatus     { return o.field(o.obj) }
func (o typedObject[T]) setStatus(s *metav1alpha1.IstioStatus) { setIstioStatus(o.field(o.obj), s) }
func (o typedObject[T]) update(ctx context.Context) error {
	_, err := o.client.UpdateStatus(ctx, o.obj, metav1.UpdateOptions{})
	return err
}

// setIstioStatus copies src's fields into dst (a proto message is not
// copied by value).
func setIstioStatus(dst, src *metav1alpha1.IstioStatus) {
	dst.Conditions, dst.ValidationMessages, dst.ObservedGeneration = src.Conditions, src.ValidationMessages, src.ObservedGeneration
}

// kindOf builds a statusKind from a typed client and the object's fields.
func kindOf[T any](client func(c istioclient.Interface, ns string) typedStatusClient[T],
	meta func(*T) *metav1.ObjectMeta, field func(*T) *metav1alpha1.IstioStatus) *statusKind {
	return &statusKind{get: func(ctx context.Context, c istioclient.Interface, ns, name string) (statusObject, error) {
		cl := client(c, ns)
		obj, err := cl.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return typedObject[T]{obj: obj, client: cl, meta: meta, field: field}, nil
	}}
}

// StatusKinds lists the kinds whose status the StatusWriter writes, sorted
// (the chart grants update on their status subresource; test/helm checks).
func StatusKinds() []model.Kind {
	out := make([]model.Kind, 0, len(statusKinds))
	for k := range statusKinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// statusKinds are the kinds whose status is written: those with an
// IstioStatus (ServiceEntry's status is its own type and is left alone).
var statusKinds = map[model.Kind]*statusKind{
	model.KindVirtualService: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[networkingv1.VirtualService] {
		return c.NetworkingV1().VirtualServices(ns)
	}, func(o *networkingv1.VirtualService) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *networkingv1.VirtualService) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindDestinationRule: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[networkingv1.DestinationRule] {
		return c.NetworkingV1().DestinationRules(ns)
	}, func(o *networkingv1.DestinationRule) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *networkingv1.DestinationRule) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindGateway: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[networkingv1.Gateway] {
		return c.NetworkingV1().Gateways(ns)
	}, func(o *networkingv1.Gateway) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *networkingv1.Gateway) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindSidecar: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[networkingv1.Sidecar] {
		return c.NetworkingV1().Sidecars(ns)
	}, func(o *networkingv1.Sidecar) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *networkingv1.Sidecar) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindWorkloadEntry: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[networkingv1.WorkloadEntry] {
		return c.NetworkingV1().WorkloadEntries(ns)
	}, func(o *networkingv1.WorkloadEntry) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *networkingv1.WorkloadEntry) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindEnvoyFilter: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[networkingv1alpha3.EnvoyFilter] {
		return c.NetworkingV1alpha3().EnvoyFilters(ns)
	}, func(o *networkingv1alpha3.EnvoyFilter) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *networkingv1alpha3.EnvoyFilter) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindProxyConfig: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[networkingv1beta1.ProxyConfig] {
		return c.NetworkingV1beta1().ProxyConfigs(ns)
	}, func(o *networkingv1beta1.ProxyConfig) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *networkingv1beta1.ProxyConfig) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindAuthorizationPolicy: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[securityv1.AuthorizationPolicy] {
		return c.SecurityV1().AuthorizationPolicies(ns)
	}, func(o *securityv1.AuthorizationPolicy) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *securityv1.AuthorizationPolicy) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindPeerAuthentication: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[securityv1.PeerAuthentication] {
		return c.SecurityV1().PeerAuthentications(ns)
	}, func(o *securityv1.PeerAuthentication) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *securityv1.PeerAuthentication) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindRequestAuthentication: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[securityv1.RequestAuthentication] {
		return c.SecurityV1().RequestAuthentications(ns)
	}, func(o *securityv1.RequestAuthentication) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *securityv1.RequestAuthentication) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindTelemetry: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[telemetryv1.Telemetry] {
		return c.TelemetryV1().Telemetries(ns)
	}, func(o *telemetryv1.Telemetry) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *telemetryv1.Telemetry) *metav1alpha1.IstioStatus { return &o.Status }),
	model.KindWasmPlugin: kindOf(func(c istioclient.Interface, ns string) typedStatusClient[extensionsv1alpha1.WasmPlugin] {
		return c.ExtensionsV1alpha1().WasmPlugins(ns)
	}, func(o *extensionsv1alpha1.WasmPlugin) *metav1.ObjectMeta { return &o.ObjectMeta },
		func(o *extensionsv1alpha1.WasmPlugin) *metav1alpha1.IstioStatus { return &o.Status }),
}
