package xdsproxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/xdsproxy"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestHealthReports: a VM's agent reports its probe's health through the
// proxy (a report made before the client connected waits for its first
// request), and the control plane writes it into the auto-registered
// WorkloadEntry's Healthy condition; a later report replaces it. Real
// control plane in Kubernetes mode, secure port, service-account token.
func TestHealthReports(t *testing.T) {
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "customresourcedefinitions.gen.yaml")
	if err := kubetest.InstallCRDs(t.Context(), env.Config(), crds); err != nil {
		t.Fatal(err)
	}
	const ns, sa = "vmhealth", "billing-vm"
	if _, err := env.Clientset().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ic, err := istioclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	g := &networkingv1.WorkloadGroup{ObjectMeta: metav1.ObjectMeta{Name: "billing", Namespace: ns}}
	g.Spec.Template = &networking.WorkloadEntry{ServiceAccount: sa}
	if _, err := ic.NetworkingV1().WorkloadGroups(ns).Create(t.Context(), g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.CA.RootCADir = filepath.Join(t.TempDir(), "no-plugin")
	srv := bootstraptest.Start(t, opts)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(srv.Authority().Bundle().RootPEM) {
		t.Fatal("the CA's root PEM holds no certificate")
	}
	token := env.ServiceAccountToken(t, ns, sa, "istio-ca")
	p := startProxy(t, xdsproxy.Options{
		Upstream: srv.SecureGRPCListenAddr(),
		TLS:      &tls.Config{RootCAs: pool, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12},
		Token:    func() (string, error) { return token, nil },
	})
	p.ReportHealth(xdsproxy.HealthReport{Healthy: true})

	node := bootstraptest.SidecarNode(t, "billing-vm-1", ns, "10.10.3.1", nil)
	node.Metadata.Fields["AUTO_REGISTER_GROUP"] = structpb.NewStringValue("billing")
	runClient(t, "unix://"+p.socket, adsc.Config{Node: node, Delta: true})

	health := func(want string) func() bool {
		return func() bool {
			e, err := ic.NetworkingV1().WorkloadEntries(ns).Get(t.Context(), "billing-10.10.3.1", metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, c := range e.Status.GetConditions() {
				if c.GetType() == "Healthy" {
					return c.GetStatus() == want
				}
			}
			return false
		}
	}
	testutil.Eventually(t, 30*time.Second, "Healthy=True from the report made before the client connected", health("True"))
	p.ReportHealth(xdsproxy.HealthReport{Message: "GET /ready: 503"})
	testutil.Eventually(t, 30*time.Second, "Healthy=False", health("False"))
}
