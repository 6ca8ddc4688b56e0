package patch

import (
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// syncInjection makes every webhook of ours in the injection configuration
// trust the root.
func (r *run) syncInjection() error {
	name := r.p.opts.InjectionName
	cur, err := r.mutating.Get(name)
	if apierrors.IsNotFound(err) {
		return nil // nothing to patch until it is created
	}
	if err != nil {
		return fmt.Errorf("MutatingWebhookConfiguration %s: %w", name, err)
	}
	root := r.p.opts.Root()
	next := cur.DeepCopy()
	changed := false
	for i := range next.Webhooks {
		w := &next.Webhooks[i]
		if r.p.ours(w.ClientConfig) && patchBundle(&w.ClientConfig.CABundle, root) {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if _, err := r.p.opts.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().
		Update(r.ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating MutatingWebhookConfiguration %s: %w", name, err)
	}
	r.p.log.Info("patched caBundle", "mutatingwebhookconfiguration", name)
	return nil
}

// syncValidation makes every webhook of ours in the validation
// configuration trust the root and, once the webhook serves, fail closed.
func (r *run) syncValidation() error {
	name := r.p.opts.ValidationName
	cur, err := r.validating.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ValidatingWebhookConfiguration %s: %w", name, err)
	}
	root := r.p.opts.Root()
	serving := r.p.serving.Load()
	next := cur.DeepCopy()
	changed := false
	for i := range next.Webhooks {
		w := &next.Webhooks[i]
		if !r.p.ours(w.ClientConfig) {
			continue
		}
		if patchBundle(&w.ClientConfig.CABundle, root) {
			changed = true
		}
		if serving && (w.FailurePolicy == nil || *w.FailurePolicy != admissionv1.Fail) {
			fail := admissionv1.Fail
			w.FailurePolicy = &fail
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if _, err := r.p.opts.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().
		Update(r.ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating ValidatingWebhookConfiguration %s: %w", name, err)
	}
	r.p.log.Info("patched", "validatingwebhookconfiguration", name, "failurePolicyFail", serving)
	return nil
}
