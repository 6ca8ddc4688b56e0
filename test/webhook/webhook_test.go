// Package webhook_test runs the control plane's validating webhook behind
// a real kube-apiserver: a ValidatingWebhookConfiguration points by URL at
// the webhook port, trusting the CA's root, and clients create Istio
// objects through the API server.
package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// env is one API server shared by the package's tests.
var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

var virtualServices = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}

// warnings collects the API server's warnings (admission warnings among them).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// setup installs the Istio CRDs and starts the control plane against the
// API server, its webhook certificate valid for 127.0.0.1; stop stops it
// before the test ends.
func setup(t *testing.T) (srv *bootstrap.Server, stop func()) {
	t.Helper()
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "customresourcedefinitions.gen.yaml")
	if err := kubetest.InstallCRDs(t.Context(), env.Config(), crds); err != nil {
		t.Fatalf("Istio CRDs: %v (run `make crds`)", err)
	}
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.TLSSANs = []string{"127.0.0.1"}
	return bootstraptest.StartStoppable(t, opts)
}

// registerWebhook points a ValidatingWebhookConfiguration named name by URL
// at addr's /validate for Istio's networking group, trusting caBundle, with
// failurePolicy Fail; it is deleted when the test ends.
func registerWebhook(t *testing.T, name, addr string, caBundle []byte) {
	t.Helper()
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	url := "https://" + addr + "/validate"
	timeout := int32(10)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validation.istio.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"networking.istio.io"}, APIVersions: []string{"*"}, Resources: []string{"*"}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	hooks := env.Clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := hooks.Create(t.Context(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ValidatingWebhookConfiguration: %v", err)
	}
	t.Cleanup(func() {
		if err := hooks.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete ValidatingWebhookConfiguration %s: %v", name, err)
		}
	})
}

// client is a dynamic client whose warnings land in w.
func client(t *testing.T, w *warnings) dynamic.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config())
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// badRegex passes the CRD's schema (the API server checks it first) and
// fails istiod's rules: RE2 cannot compile it.
const badRegex = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: %s, namespace: default}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {regex: "(unclosed"}}]
    route: [{destination: {host: reviews}}]
`

// createUntilWebhookAnswers creates obj until the API server calls the
// webhook (a new configuration takes effect after its informer sees it)
// and returns the last error.
func createUntilWebhookAnswers(t *testing.T, dyn dynamic.Interface, obj *unstructured.Unstructured, answered func(error) bool) error {
	t.Helper()
	var last error
	testutil.EventuallyNoError(t, 30*time.Second, "the API server calling the webhook", func() error {
		created, err := dyn.Resource(virtualServices).Namespace("default").Create(t.Context(), obj, metav1.CreateOptions{})
		if err == nil {
			// Admitted without the webhook: take it back and retry.
			_ = dyn.Resource(virtualServices).Namespace("default").Delete(t.Context(), created.GetName(), metav1.DeleteOptions{})
			return errors.New("created without the webhook's verdict")
		}
		last = err
		if !answered(err) {
			return err
		}
		return nil
	})
	return last
}

func TestInvalidVirtualServiceRefusedNamingTheField(t *testing.T) {
	srv, _ := setup(t)
	registerWebhook(t, "istio-validator-invalid", srv.HTTPSListenAddr(), srv.Authority().Bundle().RootPEM)
	dyn := client(t, &warnings{})

	err := createUntilWebhookAnswers(t, dyn, object(t, fmt.Sprintf(badRegex, "bad-regex")), func(err error) bool {
		return strings.Contains(err.Error(), `admission webhook "validation.istio.io" denied the request`)
	})
	msg := err.Error()
	t.Logf("refused: %s", msg)
	for _, want := range []string{"VirtualService default/bad-regex", "spec.http[0].match[0].uri.regex"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not name %q", msg, want)
		}
	}
	if v := bootstraptest.MetricValue(t, srv, "galley_validation_failed",
		`group="networking.istio.io"`, `reason="invalid_resource"`, `resource="virtualservices"`, `version="v1"`); v < 1 {
		t.Errorf("galley_validation_failed = %v, want at least 1", v)
	}
}

func TestUndefinedSubsetAdmittedWithWarning(t *testing.T) {
	srv, _ := setup(t)
	registerWebhook(t, "istio-validator-warn", srv.HTTPSListenAddr(), srv.Authority().Bundle().RootPEM)
	w := &warnings{}
	dyn := client(t, w)
	// Wait until the webhook answers (a denial from it) before the real create.
	createUntilWebhookAnswers(t, dyn, object(t, fmt.Sprintf(badRegex, "probe")), func(err error) bool {
		return strings.Contains(err.Error(), `admission webhook "validation.istio.io" denied the request`)
	})

	vs := object(t, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: to-v9, namespace: default}
spec:
  hosts: [reviews]
  http:
  - route: [{destination: {host: reviews, subset: v9}}]
`)
	vsClient := dyn.Resource(virtualServices).Namespace("default")
	if _, err := vsClient.Create(t.Context(), vs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("VirtualService to an undefined subset refused: %v", err)
	}
	t.Cleanup(func() { _ = vsClient.Delete(context.Background(), "to-v9", metav1.DeleteOptions{}) })
	got := strings.Join(w.all(), "\n")
	want := `VirtualService default/to-v9: spec.http[0].route[0].destination.subset: subset "v9" of host reviews.default.svc.cluster.local is not defined by any DestinationRule`
	if !strings.Contains(got, want) {
		t.Errorf("client warnings:\n%s\nwant one:\n%s", got, want)
	}
}

func TestWebhookDownFailsClosed(t *testing.T) {
	srv, stop := setup(t)
	addr, root := srv.HTTPSListenAddr(), srv.Authority().Bundle().RootPEM
	registerWebhook(t, "istio-validator-down", addr, root)
	dyn := client(t, &warnings{})
	createUntilWebhookAnswers(t, dyn, object(t, fmt.Sprintf(badRegex, "probe-down")), func(err error) bool {
		return strings.Contains(err.Error(), `admission webhook "validation.istio.io" denied the request`)
	})
	stop()

	good := object(t, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: while-down, namespace: default}
spec:
  hosts: [reviews]
  http:
  - route: [{destination: {host: reviews}}]
`)
	_, err := dyn.Resource(virtualServices).Namespace("default").Create(t.Context(), good, metav1.CreateOptions{})
	if err == nil {
		t.Fatal("VirtualService created with the webhook down and failurePolicy Fail")
	}
	msg := err.Error()
	for _, want := range []string{`failed calling webhook "validation.istio.io"`, addr} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	t.Logf("with the webhook down: %s", msg)
}
