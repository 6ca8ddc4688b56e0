package patch

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// env is one API server shared by the package's tests; webhook
// configurations are cluster-scoped, so each test renders the chart with a
// revision of its own and so gets names of its own.
var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

// renderWebhooks renders the chart's two webhook configurations with helm
// for revision, as an install into istio-system would create them.
func renderWebhooks(t *testing.T, revision string) (*admissionv1.MutatingWebhookConfiguration, *admissionv1.ValidatingWebhookConfiguration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, kubetest.Helm(t), "template", "meshpilot",
		filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot"),
		"--namespace", "istio-system", "--kube-version", kubetest.KubeVersion, "--set", "revision="+revision,
		"--show-only", "templates/mutatingwebhook.yaml", "--show-only", "templates/validatingwebhook.yaml")
	cmd.Env = []string{"HOME=" + home, "HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home, "PATH=/usr/bin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	var mwc *admissionv1.MutatingWebhookConfiguration
	var vwc *admissionv1.ValidatingWebhookConfiguration
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decoding rendered document: %v\n%s", err, doc)
		}
		switch o := obj.(type) {
		case *admissionv1.MutatingWebhookConfiguration:
			mwc = o
		case *admissionv1.ValidatingWebhookConfiguration:
			vwc = o
		}
	}
	if mwc == nil || vwc == nil {
		t.Fatalf("helm template rendered no MutatingWebhookConfiguration or ValidatingWebhookConfiguration:\n%s", out)
	}
	return mwc, vwc
}
