package kube_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestBookinfoClustersMatchFileMode: Bookinfo's manifests applied to a real
// API server (plus the EndpointSlices a controller would write) give a
// reviews-v1 sidecar the same clusters as file mode gives for the same
// manifests.
func TestBookinfoClustersMatchFileMode(t *testing.T) {
	pods := fixtures.BookinfoPods(t)
	slicesList := fixtures.BookinfoSlices(pods)
	manifests := []string{
		fixtures.Path(t, "bookinfo-kube/bookinfo.yaml"),
		fixtures.Path(t, "bookinfo-networking/destination-rule-all.yaml"),
		fixtures.Path(t, "bookinfo-networking/virtual-service-reviews-80-20.yaml"),
	}

	// File mode: the manifests, the pods and the slices in one directory.
	dir := t.TempDir()
	for _, m := range manifests {
		raw, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(m)), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	podsRaw, err := os.ReadFile(filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo", "pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pods.yaml"), podsRaw, 0o644); err != nil {
		t.Fatal(err)
	}
	var slicesYAML []string
	for _, s := range slicesList {
		b, err := yaml.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		slicesYAML = append(slicesYAML, string(b))
	}
	if err := os.WriteFile(filepath.Join(dir, "slices.yaml"), []byte(strings.Join(slicesYAML, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	fileSrv := startFileServer(t, dir)

	// Kubernetes mode: the same objects through the API server.
	env := kubetest.Start(t)
	a := newApplier(t, env)
	installCRDs(t, env, a)
	for _, m := range manifests {
		raw, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		a.apply(string(raw), "default")
	}
	c := env.Clientset()
	ctx := context.Background()
	for _, p := range pods {
		created, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
		created.Status = p.Status
		if _, err := c.CoreV1().Pods("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("pod %s status: %v", p.Name, err)
		}
	}
	for _, s := range slicesList {
		if _, err := c.DiscoveryV1().EndpointSlices("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create EndpointSlice %s: %v", s.Name, err)
		}
	}
	kubeSrv, logs := startKubeServer(t, env, nil)

	var reviewsIP string
	for _, p := range pods {
		if p.Name == "reviews-v1" {
			reviewsIP = p.Status.PodIP
		}
	}
	node := bootstraptest.SidecarNode(t, "reviews-v1", "default", reviewsIP, map[string]string{"app": "reviews", "version": "v1"})
	fromFile := bootstraptest.RunClient(t, fileSrv, adsc.Config{Node: node})
	fromKube := bootstraptest.RunClient(t, kubeSrv, adsc.Config{Node: node})
	complete := func(c *adsc.Client) bool {
		return c.HasAll() && len(c.Resources(model.ClusterType)) > 0 && hasCluster(c, "outbound|9080|v1|reviews.default.svc.cluster.local")
	}
	bootstraptest.WaitClient(t, fromFile, "file mode clusters", complete)
	bootstraptest.WaitClient(t, fromKube, "kube mode clusters", complete)
	// The API server's own Service (kubernetes.default) is real in a cluster
	// and absent from the manifests: it is the one expected difference.
	want := clusterNames(fromFile)
	bootstraptest.WaitClient(t, fromKube, "the same cluster names as file mode", func(c *adsc.Client) bool {
		return slices.Equal(withoutAPIServer(clusterNames(c)), want)
	})
	if len(want) < 10 {
		t.Fatalf("file mode served only %d clusters: %v", len(want), want)
	}
	fileClusters, kubeClusters := decodeAll(t, fromFile.Resources(model.ClusterType)), decodeAll(t, fromKube.Resources(model.ClusterType))
	for n := range kubeClusters {
		if !slices.Contains(want, n) {
			delete(kubeClusters, n)
		}
	}
	if diff := cmp.Diff(fileClusters, kubeClusters, protocmp.Transform()); diff != "" {
		t.Fatalf("clusters differ between file and Kubernetes mode (-file +kube):\n%s", diff)
	}
	for _, cl := range []string{"outbound|9080|v1|reviews.default.svc.cluster.local", "inbound|9080||"} {
		if !slices.Contains(want, cl) {
			t.Errorf("cluster %s missing from %v", cl, want)
		}
	}
	if strings.Contains(logs.String(), "forbidden") {
		t.Errorf("log mentions forbidden:\n%s", logs.String())
	}
}

func decodeAll(t *testing.T, in map[string]*anypb.Any) map[string]any {
	t.Helper()
	out := map[string]any{}
	for n, a := range in {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		out[n] = m
	}
	return out
}

func startFileServer(t *testing.T, dir string) *bootstrap.Server {
	t.Helper()
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.Log = testLogger(t, nil)
	return bootstraptest.Start(t, opts)
}

// withoutAPIServer drops the clusters of the kubernetes.default Service.
func withoutAPIServer(names []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool {
		return strings.HasSuffix(n, "|kubernetes.default.svc.cluster.local")
	})
}
