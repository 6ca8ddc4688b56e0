package agent_test

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/config"
	"github.com/meshpilot/meshpilot/pilot/autoregistration"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
)

// TestVMThroughAgent is issue 18's agent side end to end: the real
// pilot-agent binary on a "VM" laid out as Istio's VM guide installs it
// (cluster.env, mesh.yaml, root-cert.pem and istio-token, nothing from a
// pod), against a control plane in kube mode. Its first stream registers
// the VM (a WorkloadEntry of the group appears), and the group's readiness
// probe, run by the agent against the VM's application, moves the entry's
// Healthy condition: False while the application answers 503, True once it
// answers 200, False again when it fails.
func TestVMThroughAgent(t *testing.T) {
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "customresourcedefinitions.gen.yaml")
	if err := kubetest.InstallCRDs(t.Context(), env.Config(), crds); err != nil {
		t.Fatalf("Istio CRDs: %v (run `make crds`)", err)
	}
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.CA.RootCADir = filepath.Join(t.TempDir(), "no-plugin")
	srv := bootstraptest.Start(t, opts)

	ns, err := env.Clientset().CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vms-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const group, sa = "billing", "billing-vm"

	// The VM's application: its readiness answer is switched by the test.
	var ready atomic.Bool
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ready" && ready.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})}
	go app.Serve(lis)
	t.Cleanup(func() { app.Close() })
	appPort := lis.Addr().(*net.TCPAddr).Port

	istio, err := istioclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	wg := &networkingv1.WorkloadGroup{ObjectMeta: metav1.ObjectMeta{Name: group, Namespace: ns.Name}}
	wg.Spec.Metadata = &networking.WorkloadGroup_ObjectMeta{Labels: map[string]string{"app": group}}
	wg.Spec.Template = &networking.WorkloadEntry{ServiceAccount: sa, Ports: map[string]uint32{"http": uint32(appPort)}}
	wg.Spec.Probe = &networking.ReadinessProbe{PeriodSeconds: 1, HealthCheckMethod: &networking.ReadinessProbe_HttpGet{
		HttpGet: &networking.HTTPHealthCheckConfig{Path: "/ready", Port: uint32(appPort)},
	}}
	if _, err := istio.NetworkingV1().WorkloadGroups(ns.Name).Create(t.Context(), wg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The VM's files, as `istioctl x workload entry configure --autoregister`
	// writes them for this group (the probe is the group's, in mesh.yaml).
	dir := t.TempDir()
	admin, status := testutil.FreePort(t), testutil.FreePort(t)
	writeFile(t, dir, config.VMClusterEnvFile, fmt.Sprintf(`CANONICAL_REVISION='latest'
CANONICAL_SERVICE='%[1]s'
ISTIO_INBOUND_PORTS='*'
ISTIO_METAJSON_LABELS='{"app":"%[1]s","service.istio.io/canonical-name":"%[1]s"}'
ISTIO_META_AUTO_REGISTER_GROUP='%[1]s'
ISTIO_META_CLUSTER_ID='Kubernetes'
ISTIO_META_WORKLOAD_NAME='%[1]s'
ISTIO_NAMESPACE='%[2]s'
POD_NAMESPACE='%[2]s'
SERVICE_ACCOUNT='%[3]s'
TRUST_DOMAIN='cluster.local'
`, group, ns.Name, sa))
	writeFile(t, dir, config.VMMeshConfigFile, fmt.Sprintf(`defaultConfig:
  discoveryAddress: %q
  binaryPath: %q
  proxyAdminPort: %d
  statusPort: %d
  drainDuration: 2s
  terminationDrainDuration: 0.5s
  proxyMetadata:
    CANONICAL_SERVICE: %s
    ISTIO_META_AUTO_REGISTER_GROUP: %s
    POD_NAMESPACE: %s
  readinessProbe:
    periodSeconds: 1
    httpGet:
      path: /ready
      port: %d
`, srv.SecureGRPCListenAddr(), build(t, "pilot/agent/envoy/fakeenvoy"), admin, status, group, group, ns.Name, appPort))
	writeFile(t, dir, config.VMRootCertFile, string(srv.Authority().Bundle().RootPEM))
	writeFile(t, dir, config.DefaultTokenFile, env.ServiceAccountToken(t, ns.Name, sa, "istio-ca"))

	// What the VM's systemd unit adds: its address, and the control
	// plane's name in its certificate (the guide maps it in /etc/hosts).
	const vmIP = "127.0.0.1"
	startAgent(t, dir, map[string]string{"INSTANCE_IP": vmIP, "POD_NAME": "billing-vm-1", "ISTIOD_SAN": "istiod.istio-system.svc"})
	envoyClient(t, dir) // Envoy's stream is the one the agent relays upstream

	name := autoregistration.EntryName(group, vmIP, "")
	entry := func() *networkingv1.WorkloadEntry {
		e, err := istio.NetworkingV1().WorkloadEntries(ns.Name).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return e
	}
	healthy := func(e *networkingv1.WorkloadEntry) (string, string) {
		if e == nil {
			return "", ""
		}
		for _, c := range e.Status.GetConditions() {
			if c.GetType() == serviceentry.ConditionHealthy {
				return c.GetStatus(), c.GetMessage()
			}
		}
		return "", ""
	}
	waitHealth := func(want string) *networkingv1.WorkloadEntry {
		t.Helper()
		var e *networkingv1.WorkloadEntry
		waitFor(t, 30*time.Second, "WorkloadEntry "+name+" Healthy="+want, func() bool {
			e = entry()
			st, _ := healthy(e)
			return st == want
		})
		return e
	}

	e := waitHealth("False")
	if e.Spec.Address != vmIP || e.Spec.ServiceAccount != sa || e.Labels["app"] != group {
		t.Fatalf("entry spec %v labels %v: want the VM's address, the group's service account and labels", e.Spec.Address, e.Labels)
	}
	if e.Annotations[serviceentry.HealthCheckAnnotation] != "true" {
		t.Fatalf("annotations %v: a group with a probe makes a health-checked entry", e.Annotations)
	}
	if _, msg := healthy(e); !strings.Contains(msg, strconv.Itoa(http.StatusServiceUnavailable)) {
		t.Fatalf("Healthy=False message %q: want the probe's 503", msg)
	}

	ready.Store(true)
	waitHealth("True")
	ready.Store(false)
	waitHealth("False")
}
