package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/load/workload"
)

func TestNodeIsWhatIstioSends(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Namespaces = 3
	for _, i := range []int{0, 1, 4, 70000} {
		node, err := Node(&cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		p, err := model.ParseProxy(node)
		if err != nil {
			t.Fatalf("proxy %d: our model rejects node %s: %v", i, node.GetId(), err)
		}
		ns := workload.Namespace(i % 3)
		if p.Type != model.SidecarProxy || p.Metadata.Namespace != ns || p.Metadata.ClusterID != "Kubernetes" ||
			p.Metadata.Labels["app"] != "load" || p.Metadata.Labels["version"] != "v1" || p.Metadata.ServiceAccount == "" || p.Metadata.IstioVersion == "" {
			t.Fatalf("proxy %d: parsed %+v, metadata %+v", i, p, p.Metadata)
		}
		if want := ProxyIP(i).String(); !strings.HasPrefix(node.GetId(), "sidecar~"+want+"~load-") || len(p.Metadata.InstanceIPs) != 1 || p.Metadata.InstanceIPs[0] != want {
			t.Fatalf("proxy %d: id %s, INSTANCE_IPS %v, want IP %s", i, node.GetId(), p.Metadata.InstanceIPs, want)
		}
	}
	seen := map[string]int{}
	for i := range 70000 {
		ip := ProxyIP(i).String()
		if j, dup := seen[ip]; dup {
			t.Fatalf("proxies %d and %d share %s", j, i, ip)
		}
		seen[ip] = i
	}
}

func TestTrackerCountsEachKeyDown(t *testing.T) {
	tr := newTracker()
	a := tr.expect("a", 2)
	tr.done("b") // not expected: ignored
	tr.done("a")
	select {
	case <-a:
		t.Fatal("closed after 1 of 2")
	default:
	}
	tr.done("a")
	tr.done("a") // extra reports do not panic
	select {
	case <-a:
	default:
		t.Fatal("not closed after 2 of 2")
	}
	if zero := tr.expect("z", 0); zero == nil {
		t.Fatal("nil channel")
	} else {
		<-zero
	}
}

func TestConfigValidationNamesTheSetting(t *testing.T) {
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Proxies = 0 }, "proxies"},
		{func(c *Config) { c.Conns = 0 }, "conns"},
		{func(c *Config) { c.Mode = "both" }, "mode"},
		{func(c *Config) { c.Changes = 1 }, "no change source"},
		{func(c *Config) { c.Types = []string{"x"} }, "types"},
		{func(c *Config) {
			c.Changes, c.Changer, c.Types = 1, DirChanger{Dir: "."}, []string{model.ListenerType}
		}, "CDS"},
	} {
		cfg := DefaultConfig()
		c.edit(&cfg)
		if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run: got %v, want an error naming %q", err, c.want)
		}
	}
}

func TestDirChangerWritesAndRemovesMarkers(t *testing.T) {
	dir := t.TempDir()
	d := DirChanger{Dir: dir}
	for i := range 2 {
		if err := d.Apply(t.Context(), i); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "marker-1.yaml"))
	if err != nil || !strings.Contains(string(b), "marker-1.load.test") {
		t.Fatalf("marker-1.yaml: %v %s", err, b)
	}
	if err := d.Cleanup(t.Context(), 3); err != nil { // marker 2 never existed
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

func TestCommandChangerSubstitutesIndex(t *testing.T) {
	dir := t.TempDir()
	c := CommandChanger{Command: "touch " + dir + "/m-{i}", CleanupCommand: "rm -f " + dir + "/m-{i}"}
	if err := c.Apply(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "m-4")); err != nil {
		t.Fatal(err)
	}
	if err := c.Cleanup(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "m-4")); !os.IsNotExist(err) {
		t.Fatalf("m-4 not removed: %v", err)
	}
	err := CommandChanger{Command: "echo boom >&2; exit 3"}.Apply(t.Context(), 0)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("failing command: got %v, want its output in the error", err)
	}
}

func TestSumMetricAddsEveryLabelSet(t *testing.T) {
	text := []byte(`# HELP pilot_pushcontext_init_seconds Total time.
# TYPE pilot_pushcontext_init_seconds histogram
pilot_pushcontext_init_seconds_bucket{le="0.01"} 3
pilot_pushcontext_init_seconds_sum 0.25
pilot_pushcontext_init_seconds_count 7
pilot_pushcontext_init_seconds_count_other 100
pilot_xds_pushes{type="cds"} 4
pilot_xds_pushes{type="eds",x="a}b"} 5.5
`)
	if v, err := SumMetric(text, FullPushMetric); err != nil || v != 7 {
		t.Fatalf("%s: %v, %v; want 7", FullPushMetric, v, err)
	}
	if v, err := SumMetric(text, "pilot_xds_pushes"); err != nil || v != 9.5 {
		t.Fatalf("pilot_xds_pushes: %v, %v; want 9.5", v, err)
	}
	if _, err := SumMetric(text, "pilot_absent"); err == nil || !strings.Contains(err.Error(), "pilot_absent") {
		t.Fatalf("absent metric: %v", err)
	}
}

func TestEDSWatchTimesEachSubscribedProxyOnce(t *testing.T) {
	const cluster = "outbound|80||svc-0.ns-0.svc.cluster.local"
	cla := func(addrs ...string) map[string]*anypb.Any {
		return map[string]*anypb.Any{cluster: testAssignment(t, cluster, addrs...)}
	}
	w := newEDSWatch()
	w.observe(0, cla("100.64.0.1")) // nothing watched yet: ignored
	w.watch([]string{cluster})
	done := w.expect(cluster, "100.64.0.1:8080", []bool{true, false, true})
	w.observe(1, cla("100.64.0.1")) // not subscribed: ignored
	w.observe(0, cla("10.0.0.1"))   // other address
	w.observe(0, cla("100.64.0.1"))
	w.observe(0, cla("100.64.0.1")) // twice: counted once
	select {
	case <-done:
		t.Fatal("done after 1 of 2 subscribed proxies")
	default:
	}
	w.observe(2, cla("10.0.0.1", "100.64.0.1"))
	<-done
	times, slowest := w.results()
	if len(times) != 2 || len(slowest) != 1 || slowest[0] < times[0] {
		t.Fatalf("times %v, slowest %v", times, slowest)
	}
	w.expect(cluster, "100.64.0.2:8080", []bool{true, true, false})
	w.observe(1, cla("100.64.0.2"))
	if left := w.forget(cluster, "100.64.0.2:8080"); left != 1 {
		t.Fatalf("forget: %d proxies left, want 1", left)
	}
}

// testAssignment is a ClusterLoadAssignment of cluster with addrs on 8080.
func testAssignment(t testing.TB, cluster string, addrs ...string) *anypb.Any {
	t.Helper()
	c := &endpointv3.ClusterLoadAssignment{ClusterName: cluster}
	for _, a := range addrs {
		c.Endpoints = append(c.Endpoints, &endpointv3.LocalityLbEndpoints{LbEndpoints: []*endpointv3.LbEndpoint{{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{
				Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: a, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}},
			}}},
		}}})
	}
	a, err := anypb.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Every subscribed proxy receives the same assignment: the watch decodes
// each distinct one once, however many proxies report it (decoding it per
// proxy saturated pilot-load's core under churn at 2,000 proxies).
func TestEDSWatchDecodesEachAssignmentOnce(t *testing.T) {
	const cluster, proxies = "outbound|80||svc-0.ns-0.svc.cluster.local", 500
	w := newEDSWatch()
	w.watch([]string{cluster})
	want := make([]bool, proxies)
	for i := range want {
		want[i] = true
	}
	done := w.expect(cluster, "100.64.0.1:8080", want)
	before := testAssignment(t, cluster, "10.0.0.1")
	after := testAssignment(t, cluster, "10.0.0.1", "100.64.0.1")
	for i := range proxies {
		// Each proxy's response is its own copy of the bytes, as off the wire.
		w.observe(i, map[string]*anypb.Any{cluster: {TypeUrl: before.TypeUrl, Value: slices.Clone(before.Value)}})
		w.observe(i, map[string]*anypb.Any{cluster: {TypeUrl: after.TypeUrl, Value: slices.Clone(after.Value)}})
	}
	<-done
	if times, _ := w.results(); len(times) != proxies {
		t.Fatalf("%d proxies timed, want %d", len(times), proxies)
	}
	w.keysMu.Lock()
	decodes := w.decodes
	w.keysMu.Unlock()
	if decodes != 2 {
		t.Fatalf("%d assignments decoded for %d proxies, want 2 (one per distinct assignment)", decodes, proxies)
	}
	// A malformed assignment is skipped, not cached as empty.
	w.observe(0, map[string]*anypb.Any{cluster: {TypeUrl: before.TypeUrl, Value: []byte{0xff}}})
}

// BenchmarkEDSWatchObserve is one churn push as pilot-load sees it: 2,000
// proxies each reporting the same changed 20-endpoint assignment.
func BenchmarkEDSWatchObserve(b *testing.B) {
	const cluster, proxies = "outbound|80||svc-0.ns-0.svc.cluster.local", 2000
	w := newEDSWatch()
	w.watch([]string{cluster})
	want := make([]bool, proxies)
	for i := range want {
		want[i] = true
	}
	addrs := make([]string, 20)
	for k := range addrs {
		addrs[k] = fmt.Sprintf("10.0.0.%d", k+1)
	}
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		addrs[n%20] = fmt.Sprintf("100.%d.%d.%d", 64+n>>16&63, n>>8&255, n&255)
		a := testAssignment(b, cluster, addrs...)
		done := w.expect(cluster, addrs[n%20]+":8080", want)
		for i := range proxies {
			w.observe(i, map[string]*anypb.Any{cluster: a})
		}
		<-done
		w.results()
	}
}
