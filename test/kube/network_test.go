package kube_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// weighted renders the client's assignment of cluster as sorted
// "address:port/weight" strings (nil when it holds none).
func weighted(c *adsc.Client, cluster string) []string {
	a := c.Resources(model.EndpointType)[cluster]
	cla := &endpointv3.ClusterLoadAssignment{}
	if a == nil || a.UnmarshalTo(cla) != nil {
		return nil
	}
	var out []string
	for _, g := range cla.GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d/%d", sa.GetAddress(), sa.GetPortValue(), e.GetLoadBalancingWeight().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}

// setNetworkLabel sets (nw non-empty) or removes namespace ns's
// topology.istio.io/network label.
func setNetworkLabel(t *testing.T, c kubernetes.Interface, ns, nw string) {
	t.Helper()
	ctx := context.Background()
	cur, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	if nw == "" {
		delete(cur.Labels, model.LabelTopologyNetwork)
	} else {
		cur.Labels[model.LabelTopologyNetwork] = nw
	}
	if _, err := c.CoreV1().Namespaces().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label namespace %s: %v", ns, err)
	}
}

// TestNetworksFromLabels: on a real API server, endpoints take their
// network from the pod's label, else its namespace's, else the control
// plane namespace's; network-2's east-west gateway is the Service labelled
// with that network (external IP, port 15443). A sidecar on network-1
// gets its network's endpoints directly and network-2's as the gateway,
// weighted by their count; relabelling a namespace moves its endpoints
// with an EDS-only push (no PushContext build, no CDS push).
func TestNetworksFromLabels(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Clientset()
	srv, _ := startKubeServer(t, env, nil)

	mustCreate(t, "namespace", c.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	mustCreate(t, "node", c.CoreV1().Nodes().Create, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	mustCreate(t, "service", c.CoreV1().Services("shop").Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	})
	mustCreate(t, "gateway service", c.CoreV1().Services("istio-system").Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-eastwestgateway", Namespace: "istio-system",
			Labels: map[string]string{model.LabelTopologyNetwork: "network-2"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"istio": "eastwestgateway"}, ExternalIPs: []string{"192.0.2.10"},
			Ports: []corev1.ServicePort{{Name: "tls", Port: 15443}}},
	})
	sidecar := map[string]string{"app": "web", "security.istio.io/tlsMode": "istio"}
	runningPod(t, c, "shop", "web-1", "10.1.0.1", "node-a", sidecar)
	remote := map[string]string{"app": "web", "security.istio.io/tlsMode": "istio", model.LabelTopologyNetwork: "network-2"}
	runningPod(t, c, "shop", "web-2", "10.1.0.2", "node-a", remote)
	mustCreate(t, "EndpointSlice", c.DiscoveryV1().EndpointSlices("shop").Create, webSlice(map[string]string{"web-1": "10.1.0.1", "web-2": "10.1.0.2"}))

	node := bootstraptest.SidecarNode(t, "client-1", "shop", "10.1.9.9", map[string]string{"app": "client"})
	node.Metadata.Fields["NETWORK"] = structpb.NewStringValue("network-1")
	client := bootstraptest.RunClient(t, srv, adsc.Config{Node: node})
	wait := func(what string, want ...string) {
		t.Helper()
		bootstraptest.WaitClient(t, client, what+fmt.Sprint(want), func(c *adsc.Client) bool {
			return slices.Equal(weighted(c, webCluster), want)
		})
	}
	// web-1 has no network (direct); web-2 is network-2's (its label).
	wait("web-1 direct, web-2 through the gateway: ", "10.1.0.1:8080/1", "192.0.2.10:15443/1")

	pc := srv.Discovery().PushContext()
	builds := bootstraptest.MetricValue(t, srv, "pilot_pushcontext_init_seconds_count")
	cdsPushes := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="cds"`)
	setNetworkLabel(t, c, "shop", "network-2")
	wait("namespace shop on network-2: both through the gateway: ", "192.0.2.10:15443/2")
	if srv.Discovery().PushContext() != pc {
		t.Error("a namespace's network label rebuilt the PushContext")
	}
	if got := bootstraptest.MetricValue(t, srv, "pilot_pushcontext_init_seconds_count"); got != builds {
		t.Errorf("pilot_pushcontext_init_seconds_count went from %v to %v on a namespace network change", builds, got)
	}
	if got := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="cds"`); got != cdsPushes {
		t.Errorf("pilot_xds_pushes{type=cds} went from %v to %v on a namespace network change", cdsPushes, got)
	}

	// The namespace label goes; the control plane's namespace names
	// network-1, the client's: web-1 is direct again.
	setNetworkLabel(t, c, "shop", "")
	setNetworkLabel(t, c, "istio-system", "network-1")
	wait("system namespace on network-1: ", "10.1.0.1:8080/1", "192.0.2.10:15443/1")
}
