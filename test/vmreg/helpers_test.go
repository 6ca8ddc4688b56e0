package vmreg_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds"
)

// grace is PILOT_WORKLOAD_ENTRY_GRACE_PERIOD in these tests.
const grace = 2 * time.Second

// installCRDs installs the chart's Istio CRDs into env (once per API server;
// installing again is a no-op).
func installCRDs(t testing.TB) {
	t.Helper()
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "customresourcedefinitions.gen.yaml")
	if err := kubetest.InstallCRDs(t.Context(), env.Config(), crds); err != nil {
		t.Fatalf("Istio CRDs: %v (run `make crds`)", err)
	}
}

// startReplica runs a control plane replica named pod against env, with
// the short grace period.
func startReplica(t testing.TB, pod string) (*bootstrap.Server, func()) {
	t.Helper()
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.PodName = pod
	opts.WorkloadEntryGracePeriod = grace
	return bootstraptest.StartStoppable(t, opts)
}

// startReplicaWithLogs is startReplica keeping the info log for the test.
func startReplicaWithLogs(t *testing.T, pod string) (*bootstrap.Server, *bootstraptest.LogBuffer) {
	t.Helper()
	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.PodName = pod
	opts.WorkloadEntryGracePeriod = grace
	opts.Log = bootstraptest.Logger(t, slog.LevelInfo, logs)
	return bootstraptest.Start(t, opts), logs
}

func istio(t testing.TB) istioclient.Interface {
	t.Helper()
	c, err := istioclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newNamespace creates a namespace named prefix plus a random suffix.
func newNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns, err := env.Clientset().CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// createGroup creates WorkloadGroup name in ns for service account sa,
// labelled app=NAME, with a readiness probe when probe is set.
func createGroup(t testing.TB, ns, name, sa string, probe bool) *networkingv1.WorkloadGroup {
	t.Helper()
	g := &networkingv1.WorkloadGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	g.Spec.Metadata = &networking.WorkloadGroup_ObjectMeta{Labels: map[string]string{"app": name}, Annotations: map[string]string{"team": "vms"}}
	g.Spec.Template = &networking.WorkloadEntry{ServiceAccount: sa, Ports: map[string]uint32{"http": 8080}}
	if probe {
		g.Spec.Probe = &networking.ReadinessProbe{HealthCheckMethod: &networking.ReadinessProbe_HttpGet{
			HttpGet: &networking.HTTPHealthCheckConfig{Path: "/ready", Port: 8080},
		}}
	}
	out, err := istio(t).NetworkingV1().WorkloadGroups(ns).Create(t.Context(), g, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create WorkloadGroup %s/%s: %v", ns, name, err)
	}
	return out
}

// vmNode is the node istio-agent sends for a VM of group in ns at ip.
func vmNode(t testing.TB, ns, group, ip string) *discovery.DiscoveryRequest {
	t.Helper()
	node := bootstraptest.SidecarNode(t, "vm-"+strings.ReplaceAll(ip, ".", "-"), ns, ip, nil)
	node.Metadata.Fields["AUTO_REGISTER_GROUP"] = structpb.NewStringValue(group)
	return &discovery.DiscoveryRequest{Node: node, TypeUrl: model.ClusterType}
}

// vm is one VM's ADS stream.
type vm struct {
	stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	cancel context.CancelFunc
}

// connectVM opens an ADS stream on conn as a VM of group in ns at ip and
// returns it once the first response (CDS) arrived, or the stream's error.
func connectVM(t testing.TB, conn *grpc.ClientConn, ns, group, ip string) (*vm, error) {
	t.Helper()
	return connectAs(t, conn, vmNode(t, ns, group, ip))
}

// connectAs is connectVM with first as the stream's first request.
func connectAs(t testing.TB, conn *grpc.ClientConn, first *discovery.DiscoveryRequest) (*vm, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	// A stream the server ended fails Send with io.EOF; Recv then returns
	// the server's status.
	_ = stream.Send(first)
	if _, err := stream.Recv(); err != nil {
		cancel()
		return nil, err
	}
	// Keep reading (pushes) so that flow control never holds the stream.
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	return &vm{stream: stream, cancel: cancel}, nil
}

// report sends a health report: healthy, or unhealthy with message.
func (v *vm) report(t *testing.T, healthy bool, message string) {
	t.Helper()
	req := &discovery.DiscoveryRequest{TypeUrl: xds.HealthInfoType}
	if !healthy {
		req.ErrorDetail = &rpcstatus.Status{Message: message}
	}
	if err := v.stream.Send(req); err != nil {
		t.Fatalf("send health report: %v", err)
	}
}

// disconnect ends the VM's stream.
func (v *vm) disconnect() { v.cancel() }

// entryWatch follows WorkloadEntry name in ns on the API server's watch.
type entryWatch struct {
	w watch.Interface
	// initial are the entries there when the watch began, not yet read.
	initial []*networkingv1.WorkloadEntry
}

// watchEntry starts watching WorkloadEntry name in ns from now (a List's
// resource version; an entry already there arrives first as Added). It
// retries what the API server asks to retry (a watch cache behind a CRD
// just installed answers "too large resource version").
func watchEntry(t *testing.T, ns, name string) *entryWatch {
	t.Helper()
	entries := istio(t).NetworkingV1().WorkloadEntries(ns)
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := entries.List(t.Context(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(t.Context(), list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return entries.Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &entryWatch{w: w, initial: list.Items}
}

// until reads events until cond holds for one (returning its entry) or
// 30 s pass.
func (e *entryWatch) until(t *testing.T, what string, cond func(watch.EventType, *networkingv1.WorkloadEntry) bool) *networkingv1.WorkloadEntry {
	t.Helper()
	for len(e.initial) > 0 {
		we := e.initial[0]
		e.initial = e.initial[1:]
		if cond(watch.Added, we) {
			return we
		}
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-e.w.ResultChan():
			if !ok {
				t.Fatalf("waiting for %s: watch closed", what)
			}
			we, isEntry := ev.Object.(*networkingv1.WorkloadEntry)
			if isEntry && cond(ev.Type, we) {
				return we
			}
		case <-timeout:
			t.Fatalf("waiting for %s: 30 s passed", what)
		}
	}
}

// quiet reads events for d and fails on a deletion: the entry is kept.
func (e *entryWatch) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	end := time.After(d)
	for {
		select {
		case ev, ok := <-e.w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			if ev.Type == watch.Deleted {
				t.Fatal("WorkloadEntry deleted while its proxy was connected")
			}
		case <-end:
			return
		}
	}
}
