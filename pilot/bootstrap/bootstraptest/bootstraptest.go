// Package bootstraptest runs a real discovery server in-process for tests:
// the whole pipeline, on loopback ports the kernel picks.
package bootstraptest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
)

// Options returns server options for a test: every listener on
// 127.0.0.1:0, no mesh config file (defaults), a 10 ms debounce, and warn
// logs in the test's output. Set ConfigDir or KubeRestConfig, then Start.
// The secure port (CA) is on; with Kubernetes it needs the control plane's
// namespace (Namespace, istio-system), which Start creates as an install would.
func Options(t testing.TB) bootstrap.Options {
	opts := bootstrap.DefaultOptions()
	opts.MeshConfigFile = ""
	opts.GRPCAddr, opts.HTTPAddr, opts.MonitoringAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	opts.SecureGRPCAddr, opts.HTTPSAddr = "127.0.0.1:0", "127.0.0.1:0"
	opts.DebounceAfter, opts.DebounceMax = 10*time.Millisecond, time.Second
	opts.Log = Logger(t, slog.LevelWarn, nil)
	return opts
}

// Start builds and starts a server from opts and returns once it is ready
// (Kubernetes mode: caches synced; it gives up after a minute). The server
// is stopped, and waited for, when the test ends.
func Start(t testing.TB, opts bootstrap.Options) *bootstrap.Server {
	t.Helper()
	srv, _ := StartStoppable(t, opts)
	return srv
}

// StartStoppable is Start, also returning a function that stops the server
// and waits for it (a restart in the middle of a test); calling it again,
// or letting the test end, does nothing more.
func StartStoppable(t testing.TB, opts bootstrap.Options) (*bootstrap.Server, func()) {
	t.Helper()
	if opts.KubeRestConfig != nil && opts.SecureGRPCAddr != "" {
		ensureNamespace(t, opts.KubeRestConfig, opts.Namespace)
	}
	srv, err := bootstrap.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(time.Minute, cancel)
	err = srv.Start(ctx)
	timer.Stop()
	if err != nil {
		cancel()
		srv.Wait()
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); srv.Wait() }) }
	t.Cleanup(stop)
	return srv, stop
}

// Logger returns a JSON logger at level writing to the test's output and,
// when also is not nil, to also (for tests that read the logs).
func Logger(t testing.TB, level slog.Level, also io.Writer) *slog.Logger {
	w := t.Output()
	if also != nil {
		w = io.MultiWriter(also, w)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// LogBuffer collects log lines written from the server's goroutines, for
// tests that read them (pass it to Logger).
type LogBuffer = testutil.Buffer

// Metric returns the sample named exactly series from srv's /metrics page
// (see testutil.Metric); ok=false when absent.
func Metric(t testing.TB, srv *bootstrap.Server, series string) (value float64, ok bool) {
	t.Helper()
	return testutil.Metric(t, "http://"+srv.MonitoringListenAddr()+"/metrics", series)
}

// MetricValue returns the sample of name whose label set is exactly labels
// (each `key="value"`, in sorted order) from srv's /metrics page, 0 when
// absent.
func MetricValue(t testing.TB, srv *bootstrap.Server, name string, labels ...string) float64 {
	t.Helper()
	if len(labels) > 0 {
		name += "{" + strings.Join(labels, ",") + "}"
	}
	v, _ := Metric(t, srv, name)
	return v
}

// Dial opens a plaintext gRPC connection to addr, closed when the test ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// SidecarNode returns the node an Istio agent sends for pod in ns at ip.
func SidecarNode(t testing.TB, pod, ns, ip string, labels map[string]string) *corev3.Node {
	t.Helper()
	lbls := map[string]any{}
	for k, v := range labels {
		lbls[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "LABELS": lbls, "INSTANCE_IPS": ip, "ISTIO_VERSION": "1.24.0"})
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", ip, pod, ns, ns), Metadata: md}
}

// ensureNamespace creates namespace ns unless it exists: the control plane's
// own namespace, where the CA keeps Secret istio-ca-secret.
func ensureNamespace(t testing.TB, cfg *rest.Config, ns string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the control plane's namespace %s: %v", ns, err)
	}
}
