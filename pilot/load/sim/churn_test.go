package sim

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/load/workload"
)

// TestChurnKubeMode rolls pods of two Deployments in a real API server
// while proxies watch: every subscribed proxy must see every new address
// in its EDS, the old Pods must be gone and the EndpointSlices must hold
// only the new addresses, and full pushes are counted from the server's
// metrics.
func TestChurnKubeMode(t *testing.T) {
	env := kubetest.Start(t)
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	installIstioCRDs(t, env)
	wl := workload.Options{Services: 4, Endpoints: 2, Namespaces: 2, Format: workload.FormatKube, Pods: true}
	objs, err := workload.Generate(wl)
	if err != nil {
		t.Fatal(err)
	}
	if err := workload.Apply(t.Context(), dyn, objs, nil); err != nil {
		t.Fatal(err)
	}
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	srv := bootstraptest.Start(t, opts)

	cfg := DefaultConfig()
	cfg.Addr = srv.GRPCListenAddr()
	cfg.Proxies, cfg.Conns, cfg.Mode, cfg.Namespaces = 10, 2, ModeMixed, 2
	cfg.Validate = true
	cfg.PID = os.Getpid() // the server runs in this process
	cfg.Timeout = time.Minute
	cfg.Log = testLogger(t, slog.LevelInfo)
	// 4 replacements: each of the 2 Deployments' 2 pods once, paced by
	// the ticker; the phase ends after the 4th.
	cfg.Churn = &ChurnConfig{Client: dyn, Workload: wl, Deployments: 2, PerMinute: 600, Duration: time.Minute, Limit: 4,
		MetricsURL: "http://" + srv.MonitoringListenAddr() + "/metrics"}
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Churn
	if c == nil || !rep.Converged() || rep.Totals.NACKs != 0 {
		t.Fatalf("churn %+v, initial %+v, NACKs %d", c, rep.Initial, rep.Totals.NACKs)
	}
	if c.Replacements != 4 || c.WriteErrors != 0 || c.Expected != c.Replacements*10 || c.Converged != c.Expected || c.EDS.Count != c.Expected ||
		c.Slowest.Count != c.Replacements || c.FullPushes == nil || c.ServerCores == nil || c.ServerPeakRSSBytes <= 0 {
		t.Fatalf("churn figures: %+v", c)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "churn EDS") || !strings.Contains(table.String(), "full pushes") {
		t.Fatalf("table lacks the churn figures:\n%s", table.String())
	}
	t.Logf("\n%s", table.String())

	// The API server holds what a rolling restart leaves: the first pods'
	// originals are gone, and deployment 0's slice has no original address.
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	for k := range 2 {
		_, err := dyn.Resource(pods).Namespace(wl.ServiceNamespace(0)).Get(t.Context(), workload.PodName(0, k, 0), metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("pod %s: got %v, want it deleted", workload.PodName(0, k, 0), err)
		}
	}
	slices := schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	sl, err := dyn.Resource(slices).Namespace(wl.ServiceNamespace(0)).Get(t.Context(), workload.SliceName(0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprint(sl.Object["endpoints"])
	for k := range 2 {
		if ip := wl.EndpointIP(0, k).String(); strings.Contains(body, ip+"]") {
			t.Fatalf("slice %s still holds %s: %s", workload.SliceName(0), ip, body)
		}
	}
}
