package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/webhook/cabundle"
)

// installUnpatched creates the chart's two webhook configurations with an
// empty caBundle, as helm installs them; their rules match a group nobody
// serves, so the API server never calls them during the other tests.
func installUnpatched(t *testing.T, ns string) {
	t.Helper()
	ignore, none := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	path := "/validate"
	svc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "istiod", Namespace: ns, Path: &path}}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"nothing.meshpilot.invalid"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
	}}
	api := env.Clientset().AdmissionregistrationV1()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-validator-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "rev.validation.istio.io", ClientConfig: svc, Rules: rules, FailurePolicy: &ignore, SideEffects: &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector"}}
	for _, name := range []string{"rev.namespace.sidecar-injector.istio.io", "namespace.sidecar-injector.istio.io"} {
		mwc.Webhooks = append(mwc.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name: name, ClientConfig: svc, Rules: rules, FailurePolicy: &ignore, SideEffects: &none,
			AdmissionReviewVersions: []string{"v1"},
		})
	}
	if _, err := api.ValidatingWebhookConfigurations().Create(t.Context(), vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.MutatingWebhookConfigurations().Create(t.Context(), mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := api.ValidatingWebhookConfigurations().Delete(ctx, vwc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		if err := api.MutatingWebhookConfigurations().Delete(ctx, mwc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
}

// bundles returns every webhook's caBundle of both configurations.
func bundles(ctx context.Context, ns string) ([][]byte, error) {
	api := env.Clientset().AdmissionregistrationV1()
	v, err := api.ValidatingWebhookConfigurations().Get(ctx, "istio-validator-"+ns, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	m, err := api.MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range m.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out, nil
}

func allEqual(got [][]byte, want []byte) error {
	for i, b := range got {
		if !bytes.Equal(b, want) {
			return fmt.Errorf("webhook %d caBundle %q, want the root", i, b)
		}
	}
	return nil
}

// TestLeaderPatchesCABundle: the leader writes the CA's root into every
// webhook of istio-validator-NS and istio-sidecar-injector, and a pass
// after a reset (helm upgrade) writes it again.
func TestLeaderPatchesCABundle(t *testing.T) {
	const ns = "istio-system"
	installUnpatched(t, ns)
	srv, _ := setup(t)
	root := srv.Authority().Bundle().RootPEM
	testutil.EventuallyNoError(t, time.Minute, "caBundle patched by the leader", func() error {
		got, err := bundles(t.Context(), ns)
		if err != nil {
			return err
		}
		return allEqual(got, root)
	})

	// A reset, as `helm upgrade` does; one pass restores it.
	api := env.Clientset().AdmissionregistrationV1().MutatingWebhookConfigurations()
	testutil.EventuallyNoError(t, 30*time.Second, "reset the injector's caBundle", func() error {
		m, err := api.Get(t.Context(), "istio-sidecar-injector", metav1.GetOptions{})
		if err != nil {
			return err
		}
		m.Webhooks[1].ClientConfig.CABundle = nil
		_, err = api.Update(t.Context(), m, metav1.UpdateOptions{})
		return err
	})
	cabundle.Patch(t.Context(), cabundle.Options{
		Client: env.Clientset(), Validating: []string{"istio-validator-" + ns}, Mutating: []string{"istio-sidecar-injector"},
		Root: func() []byte { return root },
	})
	got, err := bundles(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := allEqual(got, root); err != nil {
		t.Fatalf("after a pass: %v", err)
	}
}
