package kube_test

import (
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestClusterAndFilesTogether: with --kubeconfig and --configDir both
// given, the cluster's services, ServiceEntries from the cluster, and the
// directory's services and Istio config are served together.
func TestClusterAndFilesTogether(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Clientset()
	a := newApplier(t, env)
	installCRDs(t, env, a)
	mustCreate(t, "namespace", c.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	mustCreate(t, "service", c.CoreV1().Services("shop").Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	})
	a.apply(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: payments, namespace: shop}
spec:
  hosts: [payments.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: https, protocol: TLS}]
`, "shop")

	srv, _ := startKubeServer(t, env, func(o *bootstrap.Options) {
		o.ConfigDir = filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo")
	})
	client := bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "client-1", "default", "10.1.9.9", nil)})
	want := []string{
		"outbound|8080||web.shop.svc.cluster.local",            // cluster Service
		"outbound|443||payments.example.com",                   // cluster ServiceEntry
		"outbound|9080|v1|reviews.default.svc.cluster.local",   // file Service + file DestinationRule
		"outbound|9080||productpage.default.svc.cluster.local", // file Service
	}
	bootstraptest.WaitClient(t, client, "services and config of both sources", func(c *adsc.Client) bool {
		for _, n := range want {
			if !hasCluster(c, n) {
				return false
			}
		}
		return true
	})
	// File endpoints (the example's pods) are served from their own shard.
	bootstraptest.WaitClient(t, client, "file endpoints", func(c *adsc.Client) bool {
		return len(c.HealthyEndpoints("outbound|9080||productpage.default.svc.cluster.local")) == 1
	})
}
