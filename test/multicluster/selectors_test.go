package multicluster_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestDiscoverySelectorsOnRemote: the mesh's discoverySelectors apply to a
// remote cluster as to the local one, each matched on the cluster's own
// namespace labels (istiod's rule). Namespace shop is selected in the local
// cluster and not (yet) in the remote one: only the local endpoints are
// served until the remote shop is labelled too.
func TestDiscoverySelectorsOnRemote(t *testing.T) {
	t.Parallel()
	envs := startEnvs(t, 2)
	local, remote := envs[0], envs[1]
	lc, rc := local.Clientset(), remote.Clientset()
	if _, err := lc.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	create(t, "mesh ConfigMap", lc.CoreV1().ConfigMaps("istio-system").Create, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "istio", Namespace: "istio-system"},
		Data:       map[string]string{"mesh": "discoverySelectors:\n- matchLabels:\n    mesh: enabled\n"},
	})
	selected := map[string]string{"mesh": "enabled"}
	create(t, "local shop", lc.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: selected}})
	workload(t, lc, "web", "v1", "10.1.0.1")
	create(t, "remote shop", rc.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	workload(t, rc, "web", "v2", "10.2.0.1")
	workload(t, rc, "remote-only", "v1", "10.2.0.9")
	// beacon, in a selected remote namespace and created last, shows the
	// remote cluster was served (its objects come in one synced batch).
	create(t, "remote lit", rc.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lit", Labels: selected}})
	create(t, "beacon", rc.CoreV1().Services("lit").Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "beacon", Namespace: "lit"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "beacon"}, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	})
	create(t, "beacon slice", rc.DiscoveryV1().EndpointSlices("lit").Create, slice("beacon", "lit", "beacon-1", "10.2.0.7"))
	const beaconCDS = "outbound|8080||beacon.lit.svc.cluster.local"

	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = local.Config()
	opts.ClusterID = localID
	opts.GatewayCredentials = false
	srv := bootstraptest.Start(t, opts)
	client := bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "sleep-1", "shop", "10.1.0.50", nil)})
	create(t, "remote secret", lc.CoreV1().Secrets("istio-system").Create, createRemoteSecret(t, remote, remoteID))
	bootstraptest.WaitClient(t, client, "the remote beacon", func(c *adsc.Client) bool {
		return slices.Equal(c.HealthyEndpoints(beaconCDS), []string{"10.2.0.7:8080"})
	})
	if got := client.HealthyEndpoints(webCDS); !slices.Equal(got, []string{"10.1.0.1:8080"}) {
		t.Fatalf("web endpoints %v: the remote shop is not selected, want the local one only", got)
	}
	if _, ok := client.Resources(model.ClusterType)[onlyCDS]; ok {
		t.Fatalf("%s served from an unselected remote namespace", onlyCDS)
	}

	ns, err := rc.CoreV1().Namespaces().Get(t.Context(), "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = selected
	if _, err := rc.CoreV1().Namespaces().Update(t.Context(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bootstraptest.WaitClient(t, client, "the remote shop's endpoints once labelled", func(c *adsc.Client) bool {
		return slices.Equal(c.HealthyEndpoints(webCDS), []string{"10.1.0.1:8080", "10.2.0.1:8080"}) &&
			slices.Equal(c.HealthyEndpoints(onlyCDS), []string{"10.2.0.9:8080"})
	})
}
