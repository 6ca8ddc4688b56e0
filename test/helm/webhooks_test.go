package helm

import (
	"bytes"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
)

// istioWebhookConfigurations reads the configurations Istio's istiod chart
// renders (shared/testdata/istio-inject/webhook-configurations.yaml).
func istioWebhookConfigurations(t *testing.T) (*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	raw, err := os.ReadFile(fixtures.Shared(t, "istio-inject/webhook-configurations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v *admissionregistrationv1.ValidatingWebhookConfiguration
	var m *admissionregistrationv1.MutatingWebhookConfiguration
	for _, doc := range bytes.Split(raw, []byte("\n---")) {
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ValidatingWebhookConfiguration":
			v = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			err = yaml.UnmarshalStrict(doc, v)
		case "MutatingWebhookConfiguration":
			m = &admissionregistrationv1.MutatingWebhookConfiguration{}
			err = yaml.UnmarshalStrict(doc, m)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if v == nil || m == nil {
		t.Fatal("fixture lacks a Validating or Mutating WebhookConfiguration")
	}
	return v, m
}

// TestTemplateWebhooksMatchIstio: the chart's istio-validator-NS and
// istio-sidecar-injector have Istio's names, webhooks, rules, selectors and
// policies, pointing at the chart's Service, with an empty caBundle the
// leader fills.
func TestTemplateWebhooksMatchIstio(t *testing.T) {
	objs := render(t)
	wantV, wantM := istioWebhookConfigurations(t)
	gotV := only[*admissionregistrationv1.ValidatingWebhookConfiguration](t, objs)
	gotM := only[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs)
	if gotV.Name != wantV.Name || gotM.Name != wantM.Name {
		t.Errorf("names %q, %q; want Istio's %q, %q", gotV.Name, gotM.Name, wantV.Name, wantM.Name)
	}
	if diff := cmp.Diff(wantV.Webhooks, gotV.Webhooks); diff != "" {
		t.Errorf("validating webhooks (-istio +chart):\n%s", diff)
	}
	if diff := cmp.Diff(wantM.Webhooks, gotM.Webhooks); diff != "" {
		t.Errorf("mutating webhooks (-istio +chart):\n%s", diff)
	}
	if rev := gotV.Labels["istio.io/rev"]; rev != "default" {
		t.Errorf("validator label istio.io/rev %q, want default", rev)
	}

	if objs := render(t, "webhooks.injection.enabled=false"); len(all[*admissionregistrationv1.MutatingWebhookConfiguration](objs)) != 0 {
		t.Error("webhooks.injection.enabled=false still renders the injector")
	}
	v := only[*admissionregistrationv1.ValidatingWebhookConfiguration](t, render(t, "webhooks.validation.failurePolicy=Fail"))
	if fp := v.Webhooks[0].FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
		t.Errorf("webhooks.validation.failurePolicy=Fail: got %v", fp)
	}
}
