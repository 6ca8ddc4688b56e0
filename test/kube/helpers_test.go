package kube_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// startKubeServer runs the control plane in Kubernetes mode against env
// and returns once it is ready.
func startKubeServer(t *testing.T, env *kubetest.Env, mutate func(*bootstrap.Options)) (*bootstrap.Server, *bootstraptest.LogBuffer) {
	t.Helper()
	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.Log = testLogger(t, logs)
	if mutate != nil {
		mutate(&opts)
	}
	srv := bootstraptest.Start(t, opts)
	if !srv.Discovery().Ready() {
		t.Fatal("server returned from Start without being ready")
	}
	return srv, logs
}

// waitUntil polls cond until it returns nil (30 s at most).
func waitUntil(t *testing.T, what string, cond func() error) {
	t.Helper()
	testutil.EventuallyNoError(t, 30*time.Second, what, cond)
}

// clusterNames is the sorted CDS resource names the client holds.
func clusterNames(c *adsc.Client) []string {
	var out []string
	for n := range c.Resources(model.ClusterType) {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func hasCluster(c *adsc.Client, name string) bool {
	_, ok := c.Resources(model.ClusterType)[name]
	return ok
}

// applier creates the objects of YAML manifests through the dynamic client.
type applier struct {
	t      *testing.T
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(t *testing.T, env *kubetest.Env) *applier {
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return &applier{t: t, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// apply creates (or updates) every document of raw; objects without a
// namespace go to ns when namespaced.
func (a *applier) apply(raw, ns string) {
	a.t.Helper()
	for i, doc := range strings.Split(raw, "\n---") {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			a.t.Fatalf("document %d: %v", i, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		a.applyObject(obj, ns)
	}
}

func (a *applier) applyObject(obj *unstructured.Unstructured, ns string) {
	a.t.Helper()
	gvk := obj.GroupVersionKind()
	var m *meta.RESTMapping
	waitUntil(a.t, "REST mapping of "+gvk.String(), func() error {
		var err error
		if m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			a.mapper.Reset()
		}
		return err
	})
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(ns)
		}
		ri = a.dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	ctx := context.Background()
	_, err := ri.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if gerr != nil {
			a.t.Fatal(gerr)
		}
		obj.SetResourceVersion(cur.GetResourceVersion())
		_, err = ri.Update(ctx, obj, metav1.UpdateOptions{})
	}
	if err != nil {
		a.t.Fatalf("apply %s %s/%s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
}

// istioCRDs returns istio.io/api's CRD manifest (the module in go.mod).
func istioCRDs(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/api").Output()
	if err != nil {
		t.Fatalf("locate istio.io/api (go list -m): %v", err)
	}
	raw, err := os.ReadFile(strings.TrimSpace(string(out)) + "/kubernetes/customresourcedefinitions.gen.yaml")
	if err != nil {
		t.Fatalf("istio CRDs: %v", err)
	}
	return string(raw)
}

// installCRDs applies Istio's CRDs and waits until networking.istio.io/v1
// and security.istio.io/v1 are served.
func installCRDs(t *testing.T, env *kubetest.Env, a *applier) {
	t.Helper()
	a.apply(istioCRDs(t), "")
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, gv := range []schema.GroupVersion{{Group: "networking.istio.io", Version: "v1"}, {Group: "security.istio.io", Version: "v1"}} {
		waitUntil(t, gv.String()+" served", func() error {
			_, err := dc.ServerResourcesForGroupVersion(gv.String())
			return err
		})
	}
	a.mapper.Reset()
}

var errNotYet = errors.New("not yet")

// testLogger logs JSON lines at info to the test's output and, when set, to logs.
func testLogger(t *testing.T, logs io.Writer) *slog.Logger {
	return bootstraptest.Logger(t, slog.LevelInfo, logs)
}
