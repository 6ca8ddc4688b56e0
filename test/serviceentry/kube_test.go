package serviceentry_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// createPod creates pod legacy-style pod name in shop on node-a at ip;
// ready says whether its status is then set to running and Ready.
func createPod(t *testing.T, c kubernetes.Interface, name, ip string, labels map[string]string, ready bool) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p, err := c.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: labels},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "legacy",
			Containers: []corev1.Container{{Name: "app", Image: "example.com/legacy:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return setStatus(t, c, p, ip, ready)
}

// setStatus makes p running at ip, Ready or not.
func setStatus(t *testing.T, c kubernetes.Interface, p *corev1.Pod, ip string, ready bool) *corev1.Pod {
	t.Helper()
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	p = p.DeepCopy()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, HostIP: "192.168.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}}}
	out, err := c.CoreV1().Pods("shop").UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("status of pod %s: %v", p.Name, err)
	}
	return out
}

// TestKubeModeWorkloadSelectorPods: the Pods of a real API server that a
// ServiceEntry selects become its endpoints; a relabel, a pod turning Ready
// and a delete each reach EDS with an endpoint-only push. The ServiceEntry
// comes from the config directory (file and cluster sources together), so
// the test needs no Istio CRDs.
func TestKubeModeWorkloadSelectorPods(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Clientset()
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
		Labels: map[string]string{"topology.kubernetes.io/region": "eu-west1", "topology.kubernetes.io/zone": "eu-west1-b"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	legacy := map[string]string{"app": "legacy", "security.istio.io/tlsMode": "istio"}
	createPod(t, c, "legacy-1", "10.1.0.1", legacy, true)
	p2 := createPod(t, c, "legacy-2", "10.1.0.2", legacy, true)
	createPod(t, c, "web-1", "10.1.0.9", map[string]string{"app": "web"}, true)

	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "entry.yaml"), legacyEntryYAML)
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.ConfigDir = dir
	srv := bootstraptest.Start(t, opts)
	client := bootstraptest.RunClient(t, srv, adsc.Config{
		Node: bootstraptest.SidecarNode(t, "client-1", "shop", "10.1.9.9", map[string]string{"app": "client"})})
	waitClient(t, client, "both legacy pods in EDS", func(c *adsc.Client) bool {
		return c.IsEDSCluster(legacyCluster) && slices.Equal(c.HealthyEndpoints(legacyCluster), []string{"10.1.0.1:8080", "10.1.0.2:8080"})
	})
	cla := loadAssignment(t, client, legacyCluster)
	if got := cla.GetEndpoints()[0].GetLocality(); got.GetRegion() != "eu-west1" || got.GetZone() != "eu-west1-b" {
		t.Errorf("locality %v, want eu-west1/eu-west1-b from node-a", got)
	}

	pc := srv.Discovery().PushContext()
	cdsPushes := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="cds"`)
	endpointOnly := func(what string) {
		t.Helper()
		if srv.Discovery().PushContext() != pc {
			t.Errorf("%s rebuilt the PushContext", what)
		}
		if got := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="cds"`); got != cdsPushes {
			t.Errorf("pilot_xds_pushes{type=cds} went from %v to %v on %s", cdsPushes, got, what)
		}
	}

	// Relabel legacy-2: it leaves.
	p2 = p2.DeepCopy()
	p2.Labels = map[string]string{"app": "retired"}
	if _, err := c.CoreV1().Pods("shop").Update(ctx, p2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitClient(t, client, "the relabelled pod gone", func(c *adsc.Client) bool {
		return slices.Equal(c.HealthyEndpoints(legacyCluster), []string{"10.1.0.1:8080"})
	})
	endpointOnly("a pod relabel")

	// A new pod is not Ready: not an endpoint until it becomes Ready.
	p3 := createPod(t, c, "legacy-3", "10.1.0.3", legacy, false)
	setStatus(t, c, p3, "10.1.0.3", true)
	waitClient(t, client, "the pod that became Ready", func(c *adsc.Client) bool {
		return slices.Equal(c.HealthyEndpoints(legacyCluster), []string{"10.1.0.1:8080", "10.1.0.3:8080"})
	})
	endpointOnly("a pod turning Ready")

	// Delete legacy-1.
	zero := int64(0)
	if err := c.CoreV1().Pods("shop").Delete(ctx, "legacy-1", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitClient(t, client, "the deleted pod gone", func(c *adsc.Client) bool {
		return slices.Equal(c.HealthyEndpoints(legacyCluster), []string{"10.1.0.3:8080"})
	})
	endpointOnly("a pod delete")
}
