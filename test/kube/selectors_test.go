package kube_test

import (
	"context"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

const (
	shopA  = "outbound|80||a.shop.svc.cluster.local"
	otherB = "outbound|80||b.other.svc.cluster.local"
	apiSvc = "outbound|443||kubernetes.default.svc.cluster.local"
)

func connectTimeout(c *adsc.Client, name string) time.Duration {
	cl := &clusterv3.Cluster{}
	a := c.Resources(model.ClusterType)[name]
	if a == nil || a.UnmarshalTo(cl) != nil {
		return 0
	}
	return cl.GetConnectTimeout().AsDuration()
}

// TestDiscoverySelectorsAndMeshConfigMap: the mesh ConfigMap's
// discoverySelectors limit the namespaces served; labelling a namespace
// brings it in; editing the ConfigMap pushes the new mesh config.
func TestDiscoverySelectorsAndMeshConfigMap(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Clientset()
	ctx := context.Background()
	for ns, labels := range map[string]map[string]string{"istio-system": nil, "shop": {"mesh": "enabled"}, "other": nil} {
		mustCreate(t, "namespace "+ns, c.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}})
	}
	cm := mustCreate(t, "mesh ConfigMap", c.CoreV1().ConfigMaps("istio-system").Create, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "istio", Namespace: "istio-system"},
		Data:       map[string]string{"mesh": "connectTimeout: 5s\ndiscoverySelectors:\n- matchLabels:\n    mesh: enabled\n"},
	})
	for _, s := range []struct{ name, ns string }{{"a", "shop"}, {"b", "other"}} {
		mustCreate(t, "service "+s.name, c.CoreV1().Services(s.ns).Create, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.ns},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": s.name}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		})
	}
	srv, _ := startKubeServer(t, env, nil)
	client := bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "client-1", "shop", "10.1.9.9", nil)})
	bootstraptest.WaitClient(t, client, "only the selected namespace's service", func(c *adsc.Client) bool {
		return hasCluster(c, shopA) && connectTimeout(c, shopA) == 5*time.Second
	})
	if hasCluster(client, otherB) || hasCluster(client, apiSvc) {
		t.Fatalf("services of unselected namespaces served: %v", clusterNames(client))
	}

	// Labelling namespace other selects it.
	other, err := c.CoreV1().Namespaces().Get(ctx, "other", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other.Labels = map[string]string{"mesh": "enabled"}
	if _, err := c.CoreV1().Namespaces().Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bootstraptest.WaitClient(t, client, "the newly selected namespace's service", func(c *adsc.Client) bool { return hasCluster(c, otherB) })

	// A ConfigMap edit: no selectors (every namespace) and a new timeout.
	cm.Data["mesh"] = "connectTimeout: 3s\n"
	if _, err := c.CoreV1().ConfigMaps("istio-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bootstraptest.WaitClient(t, client, "every namespace and the new connect timeout", func(c *adsc.Client) bool {
		return hasCluster(c, apiSvc) && connectTimeout(c, shopA) == 3*time.Second
	})

	// Deleting the ConfigMap means the defaults (10s).
	if err := c.CoreV1().ConfigMaps("istio-system").Delete(ctx, "istio", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	bootstraptest.WaitClient(t, client, "the default connect timeout", func(c *adsc.Client) bool {
		return connectTimeout(c, shopA) == 10*time.Second
	})
}
