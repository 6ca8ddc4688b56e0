package workload

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
)

func load(t *testing.T, dir string) *file.Snapshot {
	t.Helper()
	snap, err := file.NewLoader(dir, slog.New(slog.DiscardHandler)).Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Errors {
		t.Errorf("loader error: %v", e)
	}
	return snap
}

func kinds(snap *file.Snapshot) map[model.Kind]int {
	out := map[model.Kind]int{}
	for _, c := range snap.Configs {
		out[c.Kind]++
	}
	return out
}

func generateTo(t *testing.T, o Options) (string, []Object) {
	t.Helper()
	objs, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := WriteDir(dir, objs)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != o.Namespaces+1 {
		t.Fatalf("files: %v, want namespaces.yaml and one per namespace", files)
	}
	return dir, objs
}

func TestServiceEntryWorkloadLoadsCleanly(t *testing.T) {
	o := Options{Services: 30, Endpoints: 4, Namespaces: 3, Format: FormatServiceEntry, VirtualServices: true, DestinationRules: true, Sidecars: true}
	dir, _ := generateTo(t, o)
	snap := load(t, dir)
	got := kinds(snap)
	want := map[model.Kind]int{model.KindServiceEntry: 30, model.KindVirtualService: 30, model.KindDestinationRule: 30, model.KindSidecar: 3}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: got %d, want %d", k, got[k], n)
		}
	}
	addrs := map[string]bool{}
	for _, c := range snap.Configs {
		if c.Kind != model.KindServiceEntry {
			continue
		}
		se := c.Spec.(*networking.ServiceEntry)
		if len(se.GetEndpoints()) != 4 || se.GetResolution() != networking.ServiceEntry_STATIC || se.GetPorts()[0].GetNumber() != ServicePort {
			t.Fatalf("ServiceEntry %s/%s: %v", c.Namespace, c.Name, se)
		}
		if want := o.Host(mustIndex(t, c.Name)); se.GetHosts()[0] != want || c.Namespace != o.ServiceNamespace(mustIndex(t, c.Name)) {
			t.Fatalf("ServiceEntry %s/%s: host %s, want %s", c.Namespace, c.Name, se.GetHosts()[0], want)
		}
		for _, e := range se.GetEndpoints() {
			if addrs[e.GetAddress()] {
				t.Fatalf("endpoint address %s used twice", e.GetAddress())
			}
			addrs[e.GetAddress()] = true
		}
	}
	if len(snap.Kube.Services) != 0 {
		t.Fatalf("serviceentry format wrote %d Kubernetes Services", len(snap.Kube.Services))
	}
}

func mustIndex(t *testing.T, name string) int {
	t.Helper()
	var i int
	for _, ch := range strings.TrimPrefix(name, "svc-") {
		if ch < '0' || ch > '9' {
			t.Fatalf("name %q: not svc-N", name)
		}
		i = i*10 + int(ch-'0')
	}
	return i
}

func TestKubeWorkloadLoadsCleanly(t *testing.T) {
	o := Options{Services: 25, Endpoints: 3, Namespaces: 2, Format: FormatKube, VirtualServices: true}
	dir, _ := generateTo(t, o)
	snap := load(t, dir)
	if len(snap.Kube.Services) != 25 || len(snap.Kube.EndpointSlices) != 25 {
		t.Fatalf("got %d Services and %d EndpointSlices, want 25 each", len(snap.Kube.Services), len(snap.Kube.EndpointSlices))
	}
	if got := kinds(snap); got[model.KindVirtualService] != 25 || got[model.KindServiceEntry] != 0 || got[model.KindDestinationRule] != 0 {
		t.Fatalf("Istio kinds: %v", got)
	}
	ips := map[string]bool{}
	for _, s := range snap.Kube.Services {
		if s.Spec.ClusterIP == "" || ips[s.Spec.ClusterIP] {
			t.Fatalf("Service %s/%s: ClusterIP %q missing or reused", s.Namespace, s.Name, s.Spec.ClusterIP)
		}
		ips[s.Spec.ClusterIP] = true
	}
	for _, es := range snap.Kube.EndpointSlices {
		if len(es.Endpoints) != 3 || es.Labels["kubernetes.io/service-name"] == "" {
			t.Fatalf("EndpointSlice %s/%s: %d endpoints, labels %v", es.Namespace, es.Name, len(es.Endpoints), es.Labels)
		}
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	o := Options{Services: 12, Endpoints: 2, Namespaces: 3, Format: FormatServiceEntry, VirtualServices: true, DestinationRules: true, Sidecars: true}
	a, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(o)
	ya, err := YAML(a)
	if err != nil {
		t.Fatal(err)
	}
	yb, _ := YAML(b)
	if string(ya) != string(yb) {
		t.Fatal("two runs with the same options differ")
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Services: -1, Namespaces: 1, Format: FormatKube}, "services"},
		{Options{Services: 1, Endpoints: -1, Namespaces: 1, Format: FormatKube}, "endpoints"},
		{Options{Services: 1, Namespaces: 0, Format: FormatKube}, "namespaces"},
		{Options{Services: 1, Namespaces: 1, Format: "yaml"}, "format"},
		{Options{Services: 1 << 12, Endpoints: 1 << 10, Namespaces: 1, Format: FormatKube}, "endpoint range"},
	} {
		if _, err := Generate(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Generate(%+v) = %v, want error naming %q", c.o, err, c.want)
		}
	}
}

func TestMarkerLoadsAndNamesItsCluster(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "marker-7.yaml"), Marker(7)); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("WriteFile left temporary files: %v", entries)
	}
	snap := load(t, dir)
	if len(snap.Configs) != 1 || snap.Configs[0].Namespace != MarkerNamespace || snap.Configs[0].Name != "marker-7" {
		t.Fatalf("marker configs: %+v", snap.Configs)
	}
	if got := snap.Configs[0].Spec.(*networking.ServiceEntry).GetHosts(); !slices.Equal(got, []string{"marker-7.load.test"}) {
		t.Fatalf("marker hosts %v", got)
	}
	if MarkerCluster(7) != "outbound|80||marker-7.load.test" {
		t.Fatalf("MarkerCluster(7) = %s", MarkerCluster(7))
	}
}

func TestUnstructuredDropsStatusAndClusterIPs(t *testing.T) {
	objs, err := Generate(Options{Services: 1, Endpoints: 1, Namespaces: 1, Format: FormatKube})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		u, err := o.Unstructured()
		if err != nil {
			t.Fatal(err)
		}
		if u.GetKind() != o.Kind || u.GetName() != o.Name || u.GetNamespace() != o.Namespace {
			t.Fatalf("%s: unstructured identity %s %s/%s", o.Kind, u.GetKind(), u.GetNamespace(), u.GetName())
		}
		if _, ok := u.Object["status"]; ok {
			t.Fatalf("%s %s: status kept", o.Kind, o.Name)
		}
		if o.Kind == "Service" {
			if spec := u.Object["spec"].(map[string]any); spec["clusterIP"] != nil || spec["clusterIPs"] != nil {
				t.Fatalf("Service keeps ClusterIPs: %v", spec)
			}
		}
	}
}

// TestApplySendsServerSideApply checks the requests Apply makes, against a
// recording HTTP server standing in for the API server.
func TestApplySendsServerSideApply(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.URL.Query().Get("fieldManager")+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c, err := dynamic.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Generate(Options{Services: 1, Endpoints: 1, Namespaces: 1, Format: FormatKube, Sidecars: true})
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, Marker(0))
	if err := Apply(t.Context(), c, objs, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"PATCH /api/v1/namespaces/ns-0 pilot-load application/apply-patch+yaml",
		"PATCH /api/v1/namespaces/ns-0/services/svc-0 pilot-load application/apply-patch+yaml",
		"PATCH /apis/discovery.k8s.io/v1/namespaces/ns-0/endpointslices/svc-0-load pilot-load application/apply-patch+yaml",
		"PATCH /apis/networking.istio.io/v1/namespaces/ns-0/sidecars/default pilot-load application/apply-patch+yaml",
		"PATCH /apis/networking.istio.io/v1/namespaces/load-markers/serviceentries/marker-0 pilot-load application/apply-patch+yaml",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
