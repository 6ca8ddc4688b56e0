// Package kube_test runs the control plane in Kubernetes mode against a real
// kube-apiserver and etcd (internal/kubetest) and checks what an Envoy-like
// ADS client receives.
package kube_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

const (
	webHost    = "web.shop.svc.cluster.local"
	webCluster = "outbound|8080||" + webHost
	webV1      = "outbound|8080|v1|" + webHost
)

func ptr[T any](v T) *T { return &v }

func mustCreate[T any](t *testing.T, what string, create func(context.Context, T, metav1.CreateOptions) (T, error), obj T) T {
	t.Helper()
	out, err := create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s: %v", what, err)
	}
	return out
}

// runningPod creates a pod on node and marks it running and ready at ip.
func runningPod(t *testing.T, c kubernetes.Interface, ns, name, ip, node string, labels map[string]string) {
	t.Helper()
	p := mustCreate(t, "pod "+name, c.CoreV1().Pods(ns).Create, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: "web",
			Containers: []corev1.Container{{Name: "app", Image: "example.com/web:1",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
		},
	})
	p.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, HostIP: "192.168.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
}

// webSlice is the EndpointSlice of service web holding the given pods (name → IP).
func webSlice(pods map[string]string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-x1", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	names := make([]string, 0, len(pods))
	for n := range pods {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{pods[n]},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
			NodeName:   ptr("node-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: n},
		})
	}
	return s
}

func updateSlice(t *testing.T, c kubernetes.Interface, pods map[string]string) {
	t.Helper()
	ctx := context.Background()
	cur, err := c.DiscoveryV1().EndpointSlices("shop").Get(ctx, "web-x1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next := webSlice(pods)
	next.ResourceVersion = cur.ResourceVersion
	if _, err := c.DiscoveryV1().EndpointSlices("shop").Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update EndpointSlice: %v", err)
	}
}

// TestKubernetesSourceEndToEnd follows one service through its life on a
// real API server: CRDs missing at start, then applied; service, pods,
// slice and Istio config reach an ADS client; an endpoint change is an
// EDS-only push; an API server restart is survived; deletes remove.
func TestKubernetesSourceEndToEnd(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Clientset()
	srv, logs := startKubeServer(t, env, nil)

	// CRDs absent at start: one clear line per kind, no crash, ready anyway.
	for _, crd := range []string{"virtualservices.networking.istio.io", "destinationrules.networking.istio.io", "peerauthentications.security.istio.io"} {
		if !strings.Contains(logs.String(), `"msg":"Istio CRD not installed`) || !strings.Contains(logs.String(), crd) {
			t.Fatalf("no log line says CRD %s is missing:\n%s", crd, logs.String())
		}
	}
	resp, err := http.Get("http://" + srv.HTTPListenAddr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/ready = %d after start", resp.StatusCode)
	}

	mustCreate(t, "namespace", c.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	mustCreate(t, "node", c.CoreV1().Nodes().Create, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
		Labels: map[string]string{"topology.kubernetes.io/region": "eu-west1", "topology.kubernetes.io/zone": "eu-west1-b"}}})
	mustCreate(t, "service", c.CoreV1().Services("shop").Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	})
	v1 := map[string]string{"app": "web", "version": "v1"}
	runningPod(t, c, "shop", "web-1", "10.1.0.1", "node-a", v1)
	runningPod(t, c, "shop", "web-2", "10.1.0.2", "node-a", v1)
	mustCreate(t, "EndpointSlice", c.DiscoveryV1().EndpointSlices("shop").Create, webSlice(map[string]string{"web-1": "10.1.0.1"}))

	client := bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "client-1", "shop", "10.1.9.9", map[string]string{"app": "client"})})
	bootstraptest.WaitClient(t, client, "web's cluster and its one endpoint", func(c *adsc.Client) bool {
		return c.IsEDSCluster(webCluster) && slices.Equal(c.HealthyEndpoints(webCluster), []string{"10.1.0.1:8080"})
	})
	checkEndpointMetadata(t, srv)

	// The CRDs arrive: the controller starts watching; Istio config flows.
	a := newApplier(t, env)
	installCRDs(t, env, a)
	waitUntil(t, "log line: CRD picked up", func() error {
		if !strings.Contains(logs.String(), "Istio CRD installed; watching its kind") {
			return errNotYet
		}
		return nil
	})
	a.apply(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec:
  host: web
  subsets:
  - name: v1
    labels: {version: v1}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web]
  http:
  - timeout: 7s
    route:
    - destination: {host: web, subset: v1}
`, "shop")
	bootstraptest.WaitClient(t, client, "the v1 subset cluster and the VirtualService's route", func(c *adsc.Client) bool {
		return hasCluster(c, webV1) && webRouteTimeout(c) == 7*time.Second &&
			slices.Equal(c.HealthyEndpoints(webV1), []string{"10.1.0.1:8080"})
	})

	// An endpoint change is an EDS-only push: no new PushContext.
	pc := srv.Discovery().PushContext()
	builds := bootstraptest.MetricValue(t, srv, "pilot_pushcontext_init_seconds_count")
	edsPushes := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="eds"`)
	cdsPushes := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="cds"`)
	updateSlice(t, c, map[string]string{"web-1": "10.1.0.1", "web-2": "10.1.0.2"})
	bootstraptest.WaitClient(t, client, "the second endpoint", func(c *adsc.Client) bool {
		return slices.Equal(c.HealthyEndpoints(webCluster), []string{"10.1.0.1:8080", "10.1.0.2:8080"}) &&
			slices.Equal(c.HealthyEndpoints(webV1), []string{"10.1.0.1:8080", "10.1.0.2:8080"})
	})
	if srv.Discovery().PushContext() != pc {
		t.Error("an endpoint-only change rebuilt the PushContext")
	}
	if got := bootstraptest.MetricValue(t, srv, "pilot_pushcontext_init_seconds_count"); got != builds {
		t.Errorf("pilot_pushcontext_init_seconds_count went from %v to %v on an endpoint-only change", builds, got)
	}
	if got := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="eds"`); got <= edsPushes {
		t.Errorf("pilot_xds_pushes{type=eds} stayed at %v", got)
	}
	if got := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="cds"`); got != cdsPushes {
		t.Errorf("pilot_xds_pushes{type=cds} went from %v to %v on an endpoint-only change", cdsPushes, got)
	}

	// The API server restarts: the informers relist and the client converges
	// on what the cluster holds afterwards, with nothing lost or doubled.
	env.RestartAPIServer(t)
	runningPod(t, c, "shop", "web-3", "10.1.0.3", "node-a", v1)
	updateSlice(t, c, map[string]string{"web-1": "10.1.0.1", "web-2": "10.1.0.2", "web-3": "10.1.0.3"})
	want := []string{"10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080"}
	bootstraptest.WaitClient(t, client, "the endpoint added after the restart", func(c *adsc.Client) bool {
		return slices.Equal(c.HealthyEndpoints(webCluster), want)
	})
	if got := srv.Discovery().PushContext().Endpoints.Endpoints(webHost); len(got) != 3 {
		t.Errorf("endpoint index holds %d endpoints of web after the restart, want 3: %v", len(got), got)
	}

	// Removing an endpoint, then the service.
	if err := c.CoreV1().Pods("shop").Delete(context.Background(), "web-2", metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](0)}); err != nil {
		t.Fatal(err)
	}
	updateSlice(t, c, map[string]string{"web-1": "10.1.0.1", "web-3": "10.1.0.3"})
	bootstraptest.WaitClient(t, client, "the removed endpoint gone", func(c *adsc.Client) bool {
		return slices.Equal(c.HealthyEndpoints(webCluster), []string{"10.1.0.1:8080", "10.1.0.3:8080"})
	})
	if err := c.CoreV1().Services("shop").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	bootstraptest.WaitClient(t, client, "web's clusters gone", func(c *adsc.Client) bool {
		return !hasCluster(c, webCluster) && !hasCluster(c, webV1)
	})
	if strings.Contains(logs.String(), "forbidden") {
		t.Errorf("log mentions forbidden:\n%s", logs.String())
	}
}

// checkEndpointMetadata: pod labels, service account, readiness and node
// locality reach the model's endpoint.
func checkEndpointMetadata(t *testing.T, srv *bootstrap.Server) {
	t.Helper()
	eps := srv.Discovery().PushContext().Endpoints.Endpoints(webHost)
	if len(eps) != 1 {
		t.Fatalf("endpoints of web = %+v, want one", eps)
	}
	e := eps[0]
	if e.Labels["version"] != "v1" || e.ServiceAccount != "web" || !e.Healthy ||
		e.Locality != "eu-west1/eu-west1-b" || e.WorkloadName != "web-1" || e.Namespace != "shop" {
		t.Fatalf("endpoint = %+v: want pod labels, service account web, healthy, locality eu-west1/eu-west1-b", e)
	}
}

// webRouteTimeout is the timeout of web's route in route config 8080.
func webRouteTimeout(c *adsc.Client) time.Duration {
	rcs, err := c.Decoded(model.RouteType)
	if err != nil {
		return 0
	}
	rc, _ := rcs["8080"].(*routev3.RouteConfiguration)
	for _, vh := range rc.GetVirtualHosts() {
		if vh.GetName() == webHost+":8080" && len(vh.GetRoutes()) > 0 {
			return vh.GetRoutes()[0].GetRoute().GetTimeout().AsDuration()
		}
	}
	return 0
}
