package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	"github.com/meshpilot/meshpilot/pilot/config/gateway/deploy"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
)

// watchCounter counts the watches of Gateways open at once through a
// client's transport, and the most ever open.
type watchCounter struct {
	mu        sync.Mutex
	open, max int
}

func (w *watchCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		isWatch := req.URL.Query().Get("watch") == "true" && strings.HasSuffix(req.URL.Path, "/gateways")
		resp, err := rt.RoundTrip(req)
		if err != nil || !isWatch {
			return resp, err
		}
		w.mu.Lock()
		w.open++
		w.max = max(w.max, w.open)
		w.mu.Unlock()
		resp.Body = &countedBody{ReadCloser: resp.Body, done: func() {
			w.mu.Lock()
			w.open--
			w.mu.Unlock()
		}}
		return resp, nil
	})
}

func (w *watchCounter) most() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type countedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *countedBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}

// TestDeploymentSharesGatewayWatch: the deployment controller, given the
// translation controller's informers (as pilot-discovery wires them),
// deploys a Gateway while the API server never serves more than one watch
// of Gateways at a time.
func TestDeploymentSharesGatewayWatch(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "gateway-api-standard.gen.yaml")
	if err := kubetest.InstallCRDs(ctx, env.Config(), crds); err != nil {
		t.Fatalf("Gateway API CRDs: %v (run `make crds`)", err)
	}
	var watches watchCounter
	cfg := rest.CopyConfig(env.Config())
	cfg.Wrap(watches.wrap)
	client, err := gwclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	c, err := gateway.NewController(gateway.Options{Client: client, Store: memory.New(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gws, classes := c.GatewayInformers()
	d, err := deploy.New(deploy.Options{Kube: kube, Gateways: gws, Classes: classes, Metadata: meta, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 3)
	go func() { done <- c.Run(runCtx) }()
	go func() { done <- c.EnsureClasses(runCtx, gateway.DefaultClasses(false)) }()
	go func() { done <- d.Run(runCtx) }()
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
	testutil.EventuallyNoError(t, time.Minute, "create Gateway", func() error {
		_, err := client.GatewayV1().Gateways("default").Create(ctx, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "one"},
			Spec: gwv1.GatewaySpec{GatewayClassName: gateway.ClassName,
				Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}},
		}, metav1.CreateOptions{})
		return err
	})
	testutil.EventuallyNoError(t, time.Minute, "Service one-istio deployed", func() error {
		_, err := kube.CoreV1().Services("default").Get(ctx, "one-istio", metav1.GetOptions{})
		return err
	})
	if n := watches.most(); n != 1 {
		t.Errorf("at most %d watches of Gateways open at once, want 1 (shared by both controllers)", n)
	}
}
