// Package cabundle keeps the caBundle of the control plane's webhook
// configurations (ValidatingWebhookConfiguration istio-validator-NS,
// MutatingWebhookConfiguration istio-sidecar-injector) equal to the mesh's
// root, as istiod's webhook patchers do: the chart installs them with an
// empty caBundle, and the API server then trusts the webhook's certificate.
package cabundle

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultResync is how often the configurations are re-read when nothing
// changed: a `helm upgrade` resets caBundle to the chart's empty value.
const DefaultResync = 30 * time.Second

// Options configure Run.
type Options struct {
	Client kubernetes.Interface
	// Validating and Mutating name the configurations to patch; a missing
	// one is skipped (logged once per pass at debug level) until it appears.
	Validating, Mutating []string
	// Root returns the current root certificate PEM.
	Root func() []byte
	// Changes receives a value when Root's result changed; nil never does.
	Changes <-chan struct{}
	// Resync is the period of the re-reads; 0 means DefaultResync.
	Resync time.Duration
	Log    *slog.Logger
}

// Run patches the configurations at once, on every root change and every
// Resync, until ctx ends. It is meant to run on the leader only.
func Run(ctx context.Context, o Options) error {
	if o.Resync <= 0 {
		o.Resync = DefaultResync
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	tick := time.NewTicker(o.Resync)
	defer tick.Stop()
	for {
		Patch(ctx, o)
		select {
		case <-ctx.Done():
			return nil
		case <-o.Changes:
		case <-tick.C:
		}
	}
}

// Patch makes one pass: every webhook of each named configuration whose
// caBundle differs from the root gets the root. Errors are logged and the
// next pass retries (an update conflict means someone else just wrote).
func Patch(ctx context.Context, o Options) {
	root := o.Root()
	if len(root) == 0 {
		return
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, name := range o.Validating {
		n, err := patchValidating(ctx, o.Client, name, root)
		report(log, "ValidatingWebhookConfiguration", name, n, err)
	}
	for _, name := range o.Mutating {
		n, err := patchMutating(ctx, o.Client, name, root)
		report(log, "MutatingWebhookConfiguration", name, n, err)
	}
}

func report(log *slog.Logger, kind, name string, patched int, err error) {
	switch {
	case apierrors.IsNotFound(err):
		log.Debug("webhook configuration not found; patched when it appears", "kind", kind, "name", name)
	case err != nil:
		log.Warn("patching the webhook configuration's caBundle failed; retrying", "kind", kind, "name", name, "error", err)
	case patched > 0:
		log.Info("webhook configuration caBundle patched", "kind", kind, "name", name, "webhooks", patched)
	}
}

func patchValidating(ctx context.Context, c kubernetes.Interface, name string, root []byte) (int, error) {
	api := c.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cfg, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range cfg.Webhooks {
		if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, root) {
			cfg.Webhooks[i].ClientConfig.CABundle = root
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := api.Update(ctx, cfg, metav1.UpdateOptions{FieldManager: "meshpilot"}); err != nil {
		return 0, fmt.Errorf("update: %w", err)
	}
	return n, nil
}

func patchMutating(ctx context.Context, c kubernetes.Interface, name string, root []byte) (int, error) {
	api := c.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cfg, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range cfg.Webhooks {
		if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, root) {
			cfg.Webhooks[i].ClientConfig.CABundle = root
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := api.Update(ctx, cfg, metav1.UpdateOptions{FieldManager: "meshpilot"}); err != nil {
		return 0, fmt.Errorf("update: %w", err)
	}
	return n, nil
}
