package gateway_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
)

func TestDefaultClasses(t *testing.T) {
	names := func(cs []gateway.DefaultClass) (out []string) {
		for _, c := range cs {
			out = append(out, c.Name+"="+string(c.Controller))
		}
		return out
	}
	if got := names(gateway.DefaultClasses(false)); len(got) != 1 || got[0] != "istio=istio.io/gateway-controller" {
		t.Errorf("DefaultClasses(false) = %v, want istio only", got)
	}
	got := names(gateway.DefaultClasses(true))
	if len(got) != 2 || got[1] != "istio-remote=istio.io/unmanaged-gateway" {
		t.Errorf("DefaultClasses(true) = %v, want istio and istio-remote", got)
	}
}

// TestEnsureClassesOnAPIServer: on a real API server where a user already
// made GatewayClass istio for another controller, EnsureClasses creates
// istio-remote and leaves istio as it is; it makes a deleted default
// class again, and once the user's istio is deleted, ours replaces it and
// the status writer accepts it.
func TestEnsureClassesOnAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "gateway-api-standard.gen.yaml")
	if err := kubetest.InstallCRDs(ctx, env.Config(), crds); err != nil {
		t.Fatalf("Gateway API CRDs: %v (run `make crds`)", err)
	}
	client, err := gwclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	classes := client.GatewayV1().GatewayClasses()
	userDesc := "mine"
	testutil.EventuallyNoError(t, 30*time.Second, "create the user's GatewayClass istio", func() error {
		_, err := classes.Create(ctx, &gwv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: "istio"},
			Spec:       gwv1.GatewayClassSpec{ControllerName: "example.com/mine", Description: &userDesc},
		}, metav1.CreateOptions{})
		return err
	})

	var logs testutil.Buffer
	c, err := gateway.NewController(gateway.Options{Client: client, Store: memory.New(), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 3)
	go func() { done <- c.Run(runCtx) }()
	go func() { done <- c.WriteStatus(runCtx) }()
	go func() { done <- c.EnsureClasses(runCtx, gateway.DefaultClasses(true)) }()
	t.Cleanup(func() {
		cancel()
		for range 3 {
			if err := <-done; err != nil {
				t.Errorf("controller: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("controller logs:\n%s", logs.String())
		}
	})

	watchClass := func(name string, ok func(*gwv1.GatewayClass) string) *gwv1.GatewayClass {
		t.Helper()
		return watchUntil(t, "GatewayClass", func(ctx context.Context) (watch.Interface, error) {
			return classes.Watch(ctx, anyVersion)
		}, name, ok)
	}
	remote := watchClass("istio-remote", func(gc *gwv1.GatewayClass) string {
		if gc.Spec.Description == nil {
			return "no description"
		}
		return want(string(gc.Spec.ControllerName), string(gateway.UnmanagedController))
	})
	// istio-remote is created after istio was found: the user's class
	// was seen, and is left alone.
	user, err := classes.Get(ctx, "istio", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if user.Spec.ControllerName != "example.com/mine" || user.Spec.Description == nil || *user.Spec.Description != userDesc || user.Generation != 1 {
		t.Errorf("the user's GatewayClass istio was changed: %+v", user.Spec)
	}
	// istiod's other controller: reported unsupported.
	watchClass("istio-remote", func(gc *gwv1.GatewayClass) string {
		return want(conditions(gc.Status.Conditions), "Accepted=False/Unsupported")
	})

	if err := classes.Delete(ctx, "istio-remote", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	watchClass("istio-remote", func(gc *gwv1.GatewayClass) string {
		if gc.UID == remote.UID {
			return "not made again yet"
		}
		return ""
	})

	if err := classes.Delete(ctx, "istio", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	watchClass("istio", func(gc *gwv1.GatewayClass) string {
		if gc.UID == user.UID {
			return "the user's class"
		}
		if gc.Spec.ControllerName != gateway.ControllerName {
			return "controllerName " + string(gc.Spec.ControllerName)
		}
		return want(conditions(gc.Status.Conditions), "Accepted=True/Accepted")
	})
}
