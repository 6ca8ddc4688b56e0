package patch

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/meshpilot/meshpilot/internal/testutil"
)

const pollTimeout = 30 * time.Second

// rootSource is a root that tests change, with its change signal.
type rootSource struct {
	pem     atomic.Pointer[[]byte]
	changes chan struct{}
}

func newRootSource(pem string) *rootSource {
	r := &rootSource{changes: make(chan struct{}, 1)}
	r.set([]byte(pem))
	return r
}

func (r *rootSource) get() []byte { return *r.pem.Load() }

func (r *rootSource) set(pem []byte) {
	r.pem.Store(&pem)
	select {
	case r.changes <- struct{}{}:
	default:
	}
}

// start runs p until the test ends and checks that Run returns nil then.
func start(t *testing.T, p *Patcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// until polls cond (reading from the API server) until it holds.
func until(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, pollTimeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// foreign is a webhook calling another Service: the patcher leaves it alone.
func foreign() admissionv1.MutatingWebhook {
	none := admissionv1.SideEffectClassNone
	path := "/mutate"
	return admissionv1.MutatingWebhook{
		Name:                    "other.example.com",
		AdmissionReviewVersions: []string{"v1"},
		SideEffects:             &none,
		ClientConfig: admissionv1.WebhookClientConfig{
			Service:  &admissionv1.ServiceReference{Name: "other", Namespace: "elsewhere", Path: &path},
			CABundle: []byte("other CA"),
		},
	}
}

// createWebhooks creates both configurations, deleted when the test ends.
func createWebhooks(t *testing.T, mwc *admissionv1.MutatingWebhookConfiguration, vwc *admissionv1.ValidatingWebhookConfiguration) {
	t.Helper()
	ctx := context.Background()
	client := env.Clientset().AdmissionregistrationV1()
	if _, err := client.MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.MutatingWebhookConfigurations().Delete(ctx, mwc.Name, metav1.DeleteOptions{})
		_ = client.ValidatingWebhookConfigurations().Delete(ctx, vwc.Name, metav1.DeleteOptions{})
	})
}

func TestPatchesChartWebhooks(t *testing.T) {
	rev := fmt.Sprintf("patch%d", time.Now().UnixNano()%1e9)
	mwc, vwc := renderWebhooks(t, rev)
	mwc.Webhooks = append(mwc.Webhooks, foreign())
	ctx := context.Background()
	client := env.Clientset().AdmissionregistrationV1()
	createWebhooks(t, mwc, vwc)

	root := newRootSource("root one")
	var logs testutil.Buffer
	p := New(Options{
		Client:           env.Clientset(),
		InjectionName:    mwc.Name,
		ValidationName:   vwc.Name,
		ServiceName:      "istiod",
		ServiceNamespace: "istio-system",
		Root:             root.get,
		Changes:          root.changes,
		Log:              slog.New(slog.NewTextHandler(&logs, nil)),
	})
	start(t, p)

	// state reads both configurations: caBundles of our webhooks, the
	// foreign webhook's, and the validation failure policies.
	type state struct {
		bundles  []string
		foreign  string
		policies []admissionv1.FailurePolicyType
	}
	read := func(ctx context.Context) (state, error) {
		var s state
		m, err := client.MutatingWebhookConfigurations().Get(ctx, mwc.Name, metav1.GetOptions{})
		if err != nil {
			return s, err
		}
		for _, w := range m.Webhooks {
			if w.Name == "other.example.com" {
				s.foreign = string(w.ClientConfig.CABundle)
			} else {
				s.bundles = append(s.bundles, string(w.ClientConfig.CABundle))
			}
		}
		v, err := client.ValidatingWebhookConfigurations().Get(ctx, vwc.Name, metav1.GetOptions{})
		if err != nil {
			return s, err
		}
		for _, w := range v.Webhooks {
			s.bundles = append(s.bundles, string(w.ClientConfig.CABundle))
			s.policies = append(s.policies, *w.FailurePolicy)
		}
		return s, nil
	}
	allBundles := func(want string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			s, err := read(ctx)
			if err != nil {
				return false, err
			}
			for _, b := range s.bundles {
				if b != want {
					return false, nil
				}
			}
			return len(s.bundles) == 3, nil // two injection webhooks (revision), one validation
		}
	}

	until(t, "caBundle patched into every webhook", allBundles("root one"))
	s, err := read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.foreign != "other CA" {
		t.Errorf("foreign webhook caBundle %q, want it untouched", s.foreign)
	}
	for _, fp := range s.policies {
		if fp != admissionv1.Ignore {
			t.Errorf("validation failurePolicy %s before the webhook serves, want Ignore", fp)
		}
	}

	p.MarkServing()
	until(t, "validation failurePolicy Fail", func(ctx context.Context) (bool, error) {
		s, err := read(ctx)
		if err != nil {
			return false, err
		}
		for _, fp := range s.policies {
			if fp != admissionv1.Fail {
				return false, nil
			}
		}
		return len(s.policies) == 1, nil
	})

	// Someone (a helm upgrade, a user) resets caBundle: it comes back.
	m, err := client.MutatingWebhookConfigurations().Get(ctx, mwc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = nil
	}
	if _, err := client.MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := client.ValidatingWebhookConfigurations().Get(ctx, vwc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ignore := admissionv1.Ignore
	v.Webhooks[0].ClientConfig.CABundle = nil
	v.Webhooks[0].FailurePolicy = &ignore
	if _, err := client.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, "caBundle restored after a reset", allBundles("root one"))
	until(t, "failurePolicy Fail restored after a reset", func(ctx context.Context) (bool, error) {
		v, err := client.ValidatingWebhookConfigurations().Get(ctx, vwc.Name, metav1.GetOptions{})
		return err == nil && *v.Webhooks[0].FailurePolicy == admissionv1.Fail, err
	})
	s, err = read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.foreign != "" {
		t.Errorf("foreign webhook caBundle %q after the reset, want it left empty", s.foreign)
	}

	// A new root reaches every webhook.
	root.set([]byte("root two"))
	until(t, "caBundle follows a root change", allBundles("root two"))
	if !bytes.Contains([]byte(logs.String()), []byte("patched caBundle")) {
		t.Errorf("no patch logged:\n%s", logs.String())
	}
}

func TestRunRequiresClientAndRoot(t *testing.T) {
	if err := New(Options{}).Run(context.Background()); err == nil {
		t.Error("Run without Client and Root succeeded")
	}
}

func TestRunStopsAndRunsAgain(t *testing.T) {
	p := New(Options{Client: env.Clientset(), InjectionName: "absent-injector", ValidationName: "absent-validator",
		Root: func() []byte { return []byte("root") }})
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
}

// TestPatchesConfigurationsCreatedLater: the configurations appear after
// the patcher started (an install racing the leader), and MarkServing came
// before Run: both are patched on creation.
func TestPatchesConfigurationsCreatedLater(t *testing.T) {
	rev := fmt.Sprintf("later%d", time.Now().UnixNano()%1e9)
	mwc, vwc := renderWebhooks(t, rev)
	p := New(Options{
		Client:           env.Clientset(),
		InjectionName:    mwc.Name,
		ValidationName:   vwc.Name,
		ServiceName:      "istiod",
		ServiceNamespace: "istio-system",
		Root:             func() []byte { return []byte("late root") },
	})
	p.MarkServing()
	start(t, p)

	client := env.Clientset().AdmissionregistrationV1()
	createWebhooks(t, mwc, vwc)
	until(t, "injection caBundle patched on creation", func(ctx context.Context) (bool, error) {
		m, err := client.MutatingWebhookConfigurations().Get(ctx, mwc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, w := range m.Webhooks {
			if string(w.ClientConfig.CABundle) != "late root" {
				return false, nil
			}
		}
		return true, nil
	})
	until(t, "validation caBundle and failurePolicy Fail on creation", func(ctx context.Context) (bool, error) {
		v, err := client.ValidatingWebhookConfigurations().Get(ctx, vwc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		w := v.Webhooks[0]
		return string(w.ClientConfig.CABundle) == "late root" && *w.FailurePolicy == admissionv1.Fail, nil
	})
}
