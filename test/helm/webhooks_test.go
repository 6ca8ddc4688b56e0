package helm

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	webhook "github.com/meshpilot/meshpilot/pilot/webhook/server"
)

// The chart's webhook configurations against a default Istio install's
// (shared testdata istio-inject/webhook-configurations.yaml). Compared
// semantically: every field of every webhook, caBundle aside (the leader
// patches it). Metadata other than the name differs deliberately (the
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
