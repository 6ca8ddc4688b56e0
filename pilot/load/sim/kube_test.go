package sim

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/load/workload"
)

// installIstioCRDs applies the chart's Istio CRDs and waits until they are served.
func installIstioCRDs(t *testing.T, env *kubetest.Env) {
	t.Helper()
	path := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "customresourcedefinitions.gen.yaml")
	if err := kubetest.InstallCRDs(t.Context(), env.Config(), path); err != nil {
		t.Fatalf("Istio CRDs: %v (run `make crds`)", err)
	}
}

// TestSmokeKubeMode applies a generated Kubernetes workload to a real API
// server, serves it with our discovery in Kubernetes mode, and applies two
// marker changes as ServiceEntries in the cluster. Correctness only.
func TestSmokeKubeMode(t *testing.T) {
	env := kubetest.Start(t)
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	installIstioCRDs(t, env)
	objs, err := workload.Generate(workload.Options{Services: 20, Endpoints: 2, Namespaces: 2, Format: workload.FormatKube, VirtualServices: true})
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, workload.Object{APIVersion: "v1", Kind: "Namespace", Name: "istio-system", Body: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "istio-system"},
	}})
	if err := workload.Apply(t.Context(), dyn, objs, nil); err != nil {
		t.Fatal(err)
	}

	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	srv := bootstraptest.Start(t, opts)

	cfg := DefaultConfig()
	cfg.Addr = srv.GRPCListenAddr()
	cfg.Proxies, cfg.Conns, cfg.Mode, cfg.Namespaces = 10, 2, ModeMixed, 2
	cfg.Changes, cfg.Changer = 2, KubeChanger{Client: dyn}
	cfg.Validate = true
	cfg.Log = testLogger(t, slog.LevelInfo)
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Converged() || rep.Totals.NACKs != 0 {
		t.Fatalf("kube mode: initial %+v, changes %+v, NACKs %d, last stream error %q", rep.Initial, rep.Changes, rep.Totals.NACKs, rep.Totals.LastStreamError)
	}
	if rep.Initial.Resources["cds"] < 20 || rep.Initial.Resources["eds"] < 20 {
		t.Fatalf("proxy 0 resources: %v, want the 20 generated services", rep.Initial.Resources)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	// The markers are gone from the cluster.
	se := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "serviceentries"}
	list, err := dyn.Resource(se).Namespace(workload.MarkerNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("%d markers left in the cluster", len(list.Items))
	}
}
