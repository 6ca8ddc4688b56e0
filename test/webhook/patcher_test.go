package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
)

// controlPlaneNS is the namespace bootstraptest runs the control plane in.
const controlPlaneNS = "istio-system"

// renderChart renders one template of the chart into obj with the real
// helm, installed in controlPlaneNS.
func renderChart(t *testing.T, template string, obj any) {
	t.Helper()
	chart := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot")
	out, err := exec.Command(kubetest.Helm(t), "template", "meshpilot", chart, "-n", controlPlaneNS,
		"--kube-version", kubetest.KubeVersion, "--show-only", template).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template --show-only %s: %v\n%s", template, err, out)
	}
	if err := yaml.UnmarshalStrict(out, obj); err != nil {
		t.Fatalf("%s: %v\n%s", template, err, out)
	}
}

// inertRules match a group nobody serves: the configurations keep the
// chart's names, Service, paths and policies, but the API server never
// calls them while the other tests create pods and Istio config.
var inertRules = []admissionregistrationv1.RuleWithOperations{{
	Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
	Rule:       admissionregistrationv1.Rule{APIGroups: []string{"nothing.meshpilot.invalid"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
}}

// othersWebhook is a webhook of someone else (called by URL, not through
// the chart's Service) added to the chart's validation configuration: the
// patcher must leave it alone.
const othersWebhook = "others.example.com"

// installChartWebhooks creates the chart's two webhook configurations as
// helm renders them (empty caBundle, validation failurePolicy Ignore), with
// inert rules and one foreign webhook in the validating one. They are
// deleted when the test ends.
func installChartWebhooks(t *testing.T) (mutating, validating string) {
	t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	renderChart(t, "templates/mutatingwebhook.yaml", mwc)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	renderChart(t, "templates/validatingwebhook.yaml", vwc)
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].Rules = inertRules
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].Rules = inertRules
		if p := vwc.Webhooks[i].FailurePolicy; p == nil || *p != admissionregistrationv1.Ignore {
			t.Fatalf("chart's validation webhook %s: failurePolicy %v, want Ignore until the webhook serves", vwc.Webhooks[i].Name, p)
		}
	}
	other := vwc.Webhooks[0].DeepCopy()
	url := "https://others.example.com/validate"
	other.Name, other.ClientConfig = othersWebhook, admissionregistrationv1.WebhookClientConfig{URL: &url}
	vwc.Webhooks = append(vwc.Webhooks, *other)

	api := env.Clientset().AdmissionregistrationV1()
	if _, err := api.MutatingWebhookConfigurations().Create(t.Context(), mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ValidatingWebhookConfigurations().Create(t.Context(), vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := api.MutatingWebhookConfigurations().Delete(ctx, mwc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		if err := api.ValidatingWebhookConfigurations().Delete(ctx, vwc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	return mwc.Name, vwc.Name
}

// patched reports why the two configurations are not yet as the leader
// keeps them: every chart webhook trusts root, validation fails closed,
// and the foreign webhook is untouched (no caBundle, Ignore).
func patched(ctx context.Context, mutating, validating string, root []byte) error {
	api := env.Clientset().AdmissionregistrationV1()
	m, err := api.MutatingWebhookConfigurations().Get(ctx, mutating, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, w := range m.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, root) {
			return fmt.Errorf("%s webhook %s: caBundle %q, want the root", mutating, w.Name, w.ClientConfig.CABundle)
		}
	}
	v, err := api.ValidatingWebhookConfigurations().Get(ctx, validating, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, w := range v.Webhooks {
		wantBundle, wantPolicy := root, admissionregistrationv1.Fail
		if w.Name == othersWebhook {
			wantBundle, wantPolicy = nil, admissionregistrationv1.Ignore
		}
		if !bytes.Equal(w.ClientConfig.CABundle, wantBundle) {
			return fmt.Errorf("%s webhook %s: caBundle %q, want %q", validating, w.Name, w.ClientConfig.CABundle, wantBundle)
		}
		if w.FailurePolicy == nil || *w.FailurePolicy != wantPolicy {
			return fmt.Errorf("%s webhook %s: failurePolicy %v, want %s", validating, w.Name, w.FailurePolicy, wantPolicy)
		}
	}
	return nil
}

// TestLeaderPatchesChartWebhooks: the control plane's leader patches the
// chart's istio-sidecar-injector and istio-validator-NS: the CA's root in
// every webhook calling the istiod Service, validation failurePolicy Fail
// once the webhook serves, nothing on a foreign webhook. A reset, as `helm
// upgrade` does, is undone from the watch, long before any resync.
func TestLeaderPatchesChartWebhooks(t *testing.T) {
	mutating, validating := installChartWebhooks(t)
	srv, _ := setup(t)
	root := srv.Authority().Bundle().RootPEM
	if len(root) == 0 {
		t.Fatal("the CA has no root")
	}
	testutil.EventuallyNoError(t, time.Minute, "webhook configurations patched by the leader", func() error {
		return patched(t.Context(), mutating, validating, root)
	})

	api := env.Clientset().AdmissionregistrationV1()
	testutil.EventuallyNoError(t, 30*time.Second, "reset the chart's webhooks", func() error {
		m, err := api.MutatingWebhookConfigurations().Get(t.Context(), mutating, metav1.GetOptions{})
		if err != nil {
			return err
		}
		m.Webhooks[len(m.Webhooks)-1].ClientConfig.CABundle = nil
		if _, err := api.MutatingWebhookConfigurations().Update(t.Context(), m, metav1.UpdateOptions{}); err != nil {
			return err
		}
		v, err := api.ValidatingWebhookConfigurations().Get(t.Context(), validating, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ignore := admissionregistrationv1.Ignore
		v.Webhooks[0].ClientConfig.CABundle, v.Webhooks[0].FailurePolicy = nil, &ignore
		_, err = api.ValidatingWebhookConfigurations().Update(t.Context(), v, metav1.UpdateOptions{})
		return err
	})
	testutil.EventuallyNoError(t, 30*time.Second, "webhook configurations re-patched after the reset", func() error {
		return patched(t.Context(), mutating, validating, root)
	})
}
