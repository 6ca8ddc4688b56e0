// Package parity holds meshpilot's configuration up against what istiod
// really sends: the same Bookinfo input, one ADS client per pod, and a
// structural comparison of Listeners, Clusters, RouteConfigurations and
// ClusterLoadAssignments with istiod's output
// (shared/testdata/istiod-xds). Differences kept on purpose are listed,
// each with its reason, in testdata/exceptions.yaml.
package parity

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

const exceptionsFile = "testdata/exceptions.yaml"

// xdsTypes maps the fixture's type directories to xDS type URLs.
var xdsTypes = map[string]string{
	listenerType: model.ListenerType,
	clusterType:  model.ClusterType,
	routeType:    model.RouteType,
	endpointType: model.EndpointType,
}

// TestBookinfoMatchesIstiod connects a sidecar of every Bookinfo pod to
// meshpilot, serving the input istiod was given, and compares the structure
// of what each receives with what istiod sent it.
func TestBookinfoMatchesIstiod(t *testing.T) {
	fixtureDir := fixtures.Shared(t, "istiod-xds/bookinfo")
	pods := fixtures.BookinfoPods(t)
	var podNames []string
	for _, p := range pods {
		podNames = append(podNames, p.Name)
	}
	sort.Strings(podNames)
	// The fixture holds a folder per pod and input/, what was applied.
	if entries, err := os.ReadDir(fixtureDir); err != nil {
		t.Fatal(err)
	} else if n := len(slices.DeleteFunc(entries, func(e os.DirEntry) bool { return !e.IsDir() || e.Name() == "input" })); n != len(pods) {
		t.Fatalf("%s holds %d pods, examples/bookinfo %d", fixtureDir, n, len(pods))
	}
	exceptions := readExceptions(t, exceptionsFile, podNames)

	srv := startServer(t, pods)
	clients := map[string]*adsc.Client{}
	for _, p := range pods {
		clients[p.Name] = bootstraptest.RunClient(t, srv, adsc.Config{Node: sidecarNode(t, p)})
	}
	var diffs []difference
	for _, p := range podNames {
		c := clients[p]
		bootstraptest.WaitClient(t, c, p+"'s complete configuration", func(c *adsc.Client) bool {
			return c.Complete() && len(c.Resources(model.RouteType)) > 0 && len(c.Resources(model.EndpointType)) > 0
		})
		for _, typ := range slices.Sorted(maps.Keys(xdsTypes)) {
			want := readFixture(t, filepath.Join(fixtureDir, p, typ), typ)
			got := ours(t, c, typ)
			diffs = append(diffs, compareResources(p, typ, want, got)...)
		}
	}

	unexplained, used := explain(exceptions, diffs)
	byPod := map[string][]difference{}
	for _, d := range unexplained {
		byPod[d.Pod] = append(byPod[d.Pod], d)
	}
	for _, p := range podNames {
		t.Run(p, func(t *testing.T) {
			for _, d := range byPod[p] {
				t.Errorf("not in %s: %s", exceptionsFile, d)
			}
		})
	}
	for _, msg := range staleExceptions(exceptionsFile, exceptions, used, podNames) {
		t.Error(msg)
	}
	t.Logf("%d differences, %d explained by %d entries of %s", len(diffs), len(diffs)-len(unexplained), len(exceptions), exceptionsFile)
}

// readFixture summarizes istiod's resources of typ from dir, by name.
func readFixture(t *testing.T, dir, typ string) map[string]summary {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]summary{}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r map[string]any
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%s/%s: %v", dir, e.Name(), err)
		}
		out[resourceName(typ, r)] = summarize(typ, r)
	}
	return out
}

func resourceName(typ string, r map[string]any) string {
	if typ == endpointType {
		return str(r["clusterName"])
	}
	return str(r["name"])
}

// ours summarizes the client's resources of typ, by name, through the
// same protojson form as the fixture.
func ours(t *testing.T, c *adsc.Client, typ string) map[string]summary {
	t.Helper()
	msgs, err := c.Decoded(xdsTypes[typ])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]summary{}
	for name, m := range msgs {
		raw, err := protojson.Marshal(m)
		if err != nil {
			t.Fatalf("%s %s: %v", typ, name, err)
		}
		var r map[string]any
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		out[name] = summarize(typ, r)
	}
	return out
}

// sidecarNode is the node the fixture's proxies sent (its README).
func sidecarNode(t *testing.T, p *corev1.Pod) *corev3.Node {
	t.Helper()
	labels := map[string]any{}
	for k, v := range p.Labels {
		labels[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE":         p.Namespace,
		"LABELS":            labels,
		"INSTANCE_IPS":      p.Status.PodIP,
		"SERVICE_ACCOUNT":   p.Spec.ServiceAccountName,
		"CLUSTER_ID":        "Kubernetes",
		"ISTIO_VERSION":     "1.28.0",
		"INTERCEPTION_MODE": "REDIRECT",
		"WORKLOAD_NAME":     "probe",
		"MESH_ID":           "cluster.local",
	})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", p.Status.PodIP, p.Name, p.Namespace, p.Namespace)
	return &corev3.Node{Id: id, Metadata: md}
}

// startServer runs meshpilot in file mode on istiod's input: the example's
// manifests, one EndpointSlice per Service, and the API server's own
// Service (kubernetes.default, 10.96.0.1:443, no endpoints reachable from
// the pod network), which every cluster has.
func startServer(t *testing.T, pods []*corev1.Pod) *bootstrap.Server {
	t.Helper()
	example := filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo")
	dir := t.TempDir()
	for _, f := range []string{"services.yaml", "pods.yaml", "destination-rule-all.yaml", "virtual-service-reviews-80-20.yaml"} {
		raw, err := os.ReadFile(filepath.Join(example, f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, f), raw)
	}
	var docs []string
	for _, o := range bookinfoObjects(pods) {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	writeFile(t, filepath.Join(dir, "cluster.yaml"), []byte(strings.Join(docs, "\n---\n")))
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	return bootstraptest.Start(t, opts)
}

func writeFile(t *testing.T, path string, raw []byte) {
	t.Helper()
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// apiServerService is the Service kube-apiserver creates for itself.
func apiServerService() *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: "10.96.0.1",
			Ports:     []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// bookinfoObjects are the API server's own Service and Bookinfo's slices.
func bookinfoObjects(pods []*corev1.Pod) []any {
	out := []any{apiServerService()}
	for _, s := range fixtures.BookinfoSlices(pods) {
		out = append(out, s)
	}
	return out
}
