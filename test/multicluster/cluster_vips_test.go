package multicluster_test

import (
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/networking/nametable"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// vipService creates Service shop/web with ClusterIP vip, ports http 8080
// and tcp 9000.
func vipService(t *testing.T, cs kubernetes.Interface, vip string) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "shop", metav1.GetOptions{}); err != nil {
		create(t, "namespace", cs.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	}
	create(t, "service", cs.CoreV1().Services("shop").Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{ClusterIP: vip, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080}, {Name: "tcp", Port: 9000}}},
	})
}

// routeDomains returns the domains of route configuration name's virtual
// host for web.
func routeDomains(t *testing.T, c *adsc.Client, name string) []string {
	t.Helper()
	rds, err := c.Decoded(model.RouteType)
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := rds[name].(*routev3.RouteConfiguration)
	for _, vh := range rc.GetVirtualHosts() {
		if slices.Contains(vh.GetDomains(), "web.shop.svc.cluster.local") {
			return vh.GetDomains()
		}
	}
	return nil
}

func hasListener(c *adsc.Client, name string) bool {
	l, ok := c.Resources(model.ListenerType)[name]
	return ok && l.MessageIs(&listenerv3.Listener{})
}

// TestClusterVIPs: Service shop/web exists in both clusters with a
// different ClusterIP in each. A sidecar of the remote cluster
// (CLUSTER_ID) gets the remote ClusterIP in its outbound TCP listener, its
// HTTP route's domains and its DNS name table; a sidecar of the local
// cluster, and one without CLUSTER_ID, get the local ClusterIP; neither
// gets the other cluster's.
func TestClusterVIPs(t *testing.T) {
	t.Parallel()
	envs := startEnvs(t, 2)
	local, remote := envs[0], envs[1]
	const localVIP, remoteVIP = "10.96.1.10", "10.96.2.20"
	vipService(t, local.Clientset(), localVIP)
	vipService(t, remote.Clientset(), remoteVIP)

	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = local.Config()
	opts.ClusterID = localID
	opts.GatewayCredentials = false
	srv := bootstraptest.Start(t, opts)
	create(t, "remote secret", local.Clientset().CoreV1().Secrets("istio-system").Create, createRemoteSecret(t, remote, remoteID))

	cases := []struct {
		name, cluster, want, other string
	}{
		{"remote", remoteID, remoteVIP, localVIP},
		{"local", localID, localVIP, remoteVIP},
		{"no CLUSTER_ID", "", localVIP, remoteVIP},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := bootstraptest.SidecarNode(t, "sleep-"+tc.name, "shop", "10.9.0.50", map[string]string{"app": "sleep"})
			if tc.cluster != "" {
				node.Metadata.Fields["CLUSTER_ID"] = structpb.NewStringValue(tc.cluster)
			}
			c := bootstraptest.RunClient(t, srv, adsc.Config{Node: node})
			// The remote cluster syncs after the secret: wait for its address
			// (for the remote proxy) or for both clusters' services merged.
			bootstraptest.WaitClient(t, c, "web's listener at "+tc.want, func(c *adsc.Client) bool {
				return hasListener(c, tc.want+"_9000") && srv.Discovery().PushContext().ServiceByHost("web.shop.svc.cluster.local").ClusterVIPs != nil
			})
			if hasListener(c, tc.other+"_9000") {
				t.Errorf("listener %s_9000 of the other cluster's address", tc.other)
			}
			bootstraptest.WaitClient(t, c, "route 8080", func(c *adsc.Client) bool {
				return slices.Contains(routeDomains(t, c, "8080"), tc.want)
			})
			if d := routeDomains(t, c, "8080"); slices.Contains(d, tc.other) {
				t.Errorf("route 8080 domains %v hold the other cluster's address", d)
			}
			proxy, err := model.ParseProxy(node)
			if err != nil {
				t.Fatal(err)
			}
			if got := nametable.Build(proxy, srv.Discovery().PushContext())["web.shop.svc.cluster.local"].IPs; !slices.Equal(got, []string{tc.want}) {
				t.Errorf("name table resolves web to %v, want %s", got, tc.want)
			}
		})
	}
}
