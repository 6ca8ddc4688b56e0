package helm

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	webhook "github.com/meshpilot/meshpilot/pilot/webhook/server"
)

// The chart's webhook configurations against a default Istio install's
// (shared testdata istio-inject/webhook-configurations.yaml). Compared
// semantically: every field of every webhook, caBundle aside (the chart
// renders it empty, checked separately; the leader patches it). Metadata other than the name differs deliberately (the
// chart's own labels); the service namespace is the release's, which the
// tests install as Istio does, into istio-system.

// istioWebhooks reads Istio's two webhook configurations.
func istioWebhooks(t *testing.T) (*admissionv1.MutatingWebhookConfiguration, *admissionv1.ValidatingWebhookConfiguration) {
	t.Helper()
	raw, err := os.ReadFile(fixtures.Shared(t, "istio-inject/webhook-configurations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(string(raw))
	if err != nil {
		t.Fatalf("webhook-configurations.yaml: %v", err)
	}
	return only[*admissionv1.MutatingWebhookConfiguration](t, objs), only[*admissionv1.ValidatingWebhookConfiguration](t, objs)
}

func mutatingWebhooks(c *admissionv1.MutatingWebhookConfiguration) []admissionv1.MutatingWebhook {
	out := make([]admissionv1.MutatingWebhook, len(c.Webhooks))
	for i, w := range c.Webhooks {
		w.DeepCopyInto(&out[i])
		out[i].ClientConfig.CABundle = nil
	}
	return out
}

func validatingWebhooks(c *admissionv1.ValidatingWebhookConfiguration) []admissionv1.ValidatingWebhook {
	out := make([]admissionv1.ValidatingWebhook, len(c.Webhooks))
	for i, w := range c.Webhooks {
		w.DeepCopyInto(&out[i])
		out[i].ClientConfig.CABundle = nil
	}
	return out
}

func TestWebhookConfigurationsMatchIstio(t *testing.T) {
	istioMWC, istioVWC := istioWebhooks(t)
	objs := render(t)
	mwc := only[*admissionv1.MutatingWebhookConfiguration](t, objs)
	vwc := only[*admissionv1.ValidatingWebhookConfiguration](t, objs)
	if mwc.Name != istioMWC.Name {
		t.Errorf("MutatingWebhookConfiguration %q, want %q", mwc.Name, istioMWC.Name)
	}
	if vwc.Name != istioVWC.Name {
		t.Errorf("ValidatingWebhookConfiguration %q, want %q", vwc.Name, istioVWC.Name)
	}
	if diff := cmp.Diff(mutatingWebhooks(istioMWC), mutatingWebhooks(mwc)); diff != "" {
		t.Errorf("injection webhooks (-istio +chart):\n%s", diff)
	}
	if diff := cmp.Diff(validatingWebhooks(istioVWC), validatingWebhooks(vwc)); diff != "" {
		t.Errorf("validation webhooks (-istio +chart):\n%s", diff)
	}
	for _, w := range mwc.Webhooks {
		if len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("injection webhook %s: caBundle rendered, want empty (the leader patches it)", w.Name)
		}
	}
	for _, w := range vwc.Webhooks {
		if len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("validation webhook %s: caBundle rendered, want empty (the leader patches it)", w.Name)
		}
	}
	for _, o := range []interface{ GetLabels() map[string]string }{mwc, vwc} {
		if o.GetLabels()["istio.io/rev"] != "default" {
			t.Errorf("labels %v, want istio.io/rev=default", o.GetLabels())
		}
	}
	named[*corev1.ConfigMap](t, objs, "istio-sidecar-injector")
}

func TestWebhookConfigurationsRevision(t *testing.T) {
	istioMWC, istioVWC := istioWebhooks(t)
	const rev = "canary"
	objs := render(t, "revision="+rev)
	mwc := only[*admissionv1.MutatingWebhookConfiguration](t, objs)
	vwc := only[*admissionv1.ValidatingWebhookConfiguration](t, objs)
	if mwc.Name != "istio-sidecar-injector-canary" {
		t.Errorf("MutatingWebhookConfiguration %q, want istio-sidecar-injector-canary", mwc.Name)
	}
	if vwc.Name != "istio-validator-canary-istio-system" {
		t.Errorf("ValidatingWebhookConfiguration %q, want istio-validator-canary-istio-system", vwc.Name)
	}
	named[*corev1.ConfigMap](t, objs, "istio-sidecar-injector-canary")
	// pilot-discovery learns the revision as istiod does, from REVISION:
	// it then reads and patches exactly the objects named above.
	revisionEnv := ""
	for _, e := range only[*appsv1.Deployment](t, objs).Spec.Template.Spec.Containers[0].Env {
		if e.Name == "REVISION" {
			revisionEnv = e.Value
		}
	}
	if revisionEnv != rev {
		t.Errorf("pilot-discovery's REVISION = %q, want %q", revisionEnv, rev)
	}

	var wantM []admissionv1.MutatingWebhook
	for _, w := range mutatingWebhooks(istioMWC) {
		if w.Name == "rev.namespace.sidecar-injector.istio.io" || w.Name == "rev.object.sidecar-injector.istio.io" {
			renameRevision(w.NamespaceSelector, rev)
			renameRevision(w.ObjectSelector, rev)
			wantM = append(wantM, w)
		}
	}
	if diff := cmp.Diff(wantM, mutatingWebhooks(mwc)); diff != "" {
		t.Errorf("injection webhooks (-want +chart):\n%s", diff)
	}
	wantV := validatingWebhooks(istioVWC)
	for i := range wantV {
		renameRevision(wantV[i].ObjectSelector, rev)
	}
	if diff := cmp.Diff(wantV, validatingWebhooks(vwc)); diff != "" {
		t.Errorf("validation webhooks (-want +chart):\n%s", diff)
	}
}

// renameRevision replaces the value "default" of istio.io/rev In selectors.
func renameRevision(s *metav1.LabelSelector, rev string) {
	if s == nil {
		return
	}
	for i, e := range s.MatchExpressions {
		if e.Key == "istio.io/rev" && e.Operator == metav1.LabelSelectorOpIn {
			s.MatchExpressions[i].Values = []string{rev}
		}
	}
}

func TestWebhookPathCarriesClusterAndNetwork(t *testing.T) {
	objs := render(t, "global.multiCluster.clusterName=east", "global.network=net1")
	mwc := only[*admissionv1.MutatingWebhookConfiguration](t, objs)
	for _, w := range mwc.Webhooks {
		path := w.ClientConfig.Service.Path
		if path == nil || *path != "/inject/cluster/east/net/net1" {
			t.Fatalf("webhook %s path %v, want /inject/cluster/east/net/net1", w.Name, path)
		}
		want := map[string]string{"ISTIO_META_CLUSTER_ID": "east", "ISTIO_META_NETWORK": "net1"}
		if diff := cmp.Diff(want, webhook.ParseInjectPath(*path).Env); diff != "" {
			t.Errorf("proxy envs of %s (-want +got):\n%s", *path, diff)
		}
	}
}

// TestWebhookValues: webhooks.injection.enabled=false drops the injection
// webhooks (not the injector ConfigMap), webhooks.validation.failurePolicy
// sets validation's initial policy, and anything but Ignore or Fail is
// refused at render time.
func TestWebhookValues(t *testing.T) {
	for _, sets := range [][]string{{"webhooks.injection.enabled=false"}, {"webhooks.injection.enabled=false", "revision=canary"}} {
		objs := render(t, sets...)
		if n := len(all[*admissionv1.MutatingWebhookConfiguration](objs)); n != 0 {
			t.Errorf("%v: %d MutatingWebhookConfigurations, want none", sets, n)
		}
		only[*admissionv1.ValidatingWebhookConfiguration](t, objs)
		if len(all[*corev1.ConfigMap](objs)) != 2 {
			t.Errorf("%v: want the mesh and injector ConfigMaps", sets)
		}
	}
	for _, policy := range []admissionv1.FailurePolicyType{admissionv1.Fail, admissionv1.Ignore} {
		vwc := only[*admissionv1.ValidatingWebhookConfiguration](t, render(t, "webhooks.validation.failurePolicy="+string(policy)))
		for _, w := range vwc.Webhooks {
			if w.FailurePolicy == nil || *w.FailurePolicy != policy {
				t.Errorf("failurePolicy=%s: webhook %s has %v", policy, w.Name, w.FailurePolicy)
			}
		}
	}
	_, err := tryHelm(t, "template", releaseName, chartDir(t), "--namespace", releaseNS, "--kube-version", kubetest.KubeVersion,
		"--set", "webhooks.validation.failurePolicy=Sometimes")
	if err == nil || !strings.Contains(err.Error(), "must be Ignore or Fail") {
		t.Errorf("webhooks.validation.failurePolicy=Sometimes: err %v, want the chart's refusal", err)
	}
}
