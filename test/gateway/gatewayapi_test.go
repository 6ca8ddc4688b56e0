package gateway_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestGatewayAPIEndToEnd: with the chart's Gateway API CRDs installed, a
// Gateway of class istio and an HTTPRoute to Service web make pilot-discovery
// send the Gateway's proxy (labelled gateway-name) a listener on port 80
// and route http.80 for the route's host to web's cluster; the leader
// writes the route's Accepted condition.
func TestGatewayAPIEndToEnd(t *testing.T) {
	ctx := t.Context()
	const ns = "gwapi"
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "gateway-api-standard.gen.yaml")
	if err := kubetest.InstallCRDs(ctx, env.Config(), crds); err != nil {
		t.Fatalf("Gateway API CRDs: %v (run `make crds`)", err)
	}
	ensureNamespace(ctx, t, ns)
	if _, err := env.Clientset().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}, Selector: map[string]string{"app": "web"}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	gc, err := gwclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	v1 := gc.GatewayV1()
	// The CRDs may take a moment to be served after they are established.
	testutil.EventuallyNoError(t, time.Minute, "create GatewayClass istio", func() error {
		_, err := v1.GatewayClasses().Create(ctx, &gwv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: "istio"},
			Spec:       gwv1.GatewayClassSpec{ControllerName: gateway.ControllerName},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	testutil.EventuallyNoError(t, time.Minute, "create Gateway", func() error {
		_, err := v1.Gateways(ns).Create(ctx, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns},
			Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: []gwv1.Listener{
				{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
			}},
		}, metav1.CreateOptions{})
		return err
	})
	port := gwv1.PortNumber(8080)
	testutil.EventuallyNoError(t, time.Minute, "create HTTPRoute", func() error {
		_, err := v1.HTTPRoutes(ns).Create(ctx, &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
				Hostnames:       []gwv1.Hostname{"web.example.com"},
				Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
					BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: &port},
				}}}}},
			},
		}, metav1.CreateOptions{})
		return err
	})

	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	srv := bootstraptest.Start(t, opts)

	c := bootstraptest.RunClient(t, srv, adsc.Config{
		Node:  gatewayNode(t, ns, "gw", "10.244.3.1"),
		Types: []string{model.ClusterType, model.ListenerType, model.RouteType},
	})
	const cluster = "outbound|8080||web." + ns + ".svc.cluster.local"
	waitRoute(t, c, "web.example.com", cluster)
	rc := &routev3.RouteConfiguration{}
	if err := c.Resources(model.RouteType)["http.80"].UnmarshalTo(rc); err != nil {
		t.Fatal(err)
	}
	nt.ValidateRecursively(t, rc)
	if c.Resources(model.ListenerType)["0.0.0.0_80"] == nil {
		t.Error("no listener 0.0.0.0_80")
	}
	if c.Resources(model.ClusterType)[cluster] == nil {
		t.Errorf("no cluster %s", cluster)
	}

	testutil.EventuallyNoError(t, time.Minute, "HTTPRoute status Accepted", func() error {
		r, err := v1.HTTPRoutes(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, p := range r.Status.Parents {
			for _, cnd := range p.Conditions {
				if p.ControllerName == gateway.ControllerName && cnd.Type == "Accepted" && cnd.Status == metav1.ConditionTrue {
					return nil
				}
			}
		}
		return errors.New("not accepted yet")
	})

	// The leader deploys the Gateway (pilot/config/gateway/deploy): its
	// Service is a LoadBalancer, and no load balancer runs here, so the
	// Gateway has no address yet (AddressNotAssigned, as istiod).
	var svc *corev1.Service
	testutil.EventuallyNoError(t, time.Minute, "Deployment and Service gw-istio", func() error {
		if _, err := env.Clientset().AppsV1().Deployments(ns).Get(ctx, "gw-istio", metav1.GetOptions{}); err != nil {
			return err
		}
		var err error
		svc, err = env.Clientset().CoreV1().Services(ns).Get(ctx, "gw-istio", metav1.GetOptions{})
		return err
	})
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Fatalf("Service gw-istio is of type %s, want LoadBalancer", svc.Spec.Type)
	}
	waitGateway := func(what, wantAddrs, wantProgrammed string) {
		t.Helper()
		testutil.EventuallyNoError(t, time.Minute, "Gateway "+what, func() error {
			g, err := v1.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{})
			if err != nil {
				return err
			}
			var addrs []string
			for _, a := range g.Status.Addresses {
				addrs = append(addrs, string(*a.Type)+":"+a.Value)
			}
			programmed := ""
			for _, c := range g.Status.Conditions {
				if c.Type == string(gwv1.GatewayConditionProgrammed) {
					programmed = string(c.Status) + "/" + c.Reason
				}
			}
			if got := strings.Join(addrs, " "); got != wantAddrs || programmed != wantProgrammed {
				return fmt.Errorf("addresses %q Programmed %s, want %q %s", got, programmed, wantAddrs, wantProgrammed)
			}
			return nil
		})
	}
	waitGateway("without a load balancer address", "", "False/AddressNotAssigned")

	// A load balancer gives the Service an address: it is the Gateway's.
	setIngress := func(in corev1.LoadBalancerIngress) {
		t.Helper()
		testutil.EventuallyNoError(t, time.Minute, "Service gw-istio load balancer status", func() error {
			cur, err := env.Clientset().CoreV1().Services(ns).Get(ctx, "gw-istio", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{in}
			_, err = env.Clientset().CoreV1().Services(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
	setIngress(corev1.LoadBalancerIngress{IP: "192.0.2.10"})
	waitGateway("with the load balancer's IP", "IPAddress:192.0.2.10", "True/Programmed")
	setIngress(corev1.LoadBalancerIngress{Hostname: "lb.example.net"})
	waitGateway("with the load balancer's host name", "Hostname:lb.example.net", "True/Programmed")
	// The load balancer loses its address: pending again, and, as
	// istiod, the address written stays.
	testutil.EventuallyNoError(t, time.Minute, "Service gw-istio load balancer status cleared", func() error {
		cur, err := env.Clientset().CoreV1().Services(ns).Get(ctx, "gw-istio", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.LoadBalancer.Ingress = nil
		_, err = env.Clientset().CoreV1().Services(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	waitGateway("with the load balancer pending again", "Hostname:lb.example.net", "False/AddressNotAssigned")
}

// gatewayNode is the Envoy node of Gateway API Gateway gw's proxy in ns.
func gatewayNode(t *testing.T, ns, gw, ip string) *corev3.Node {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "LABELS": map[string]any{gateway.GatewayNameLabel: gw}})
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: "router~" + ip + "~" + gw + "-istio-0." + ns + "~" + ns + ".svc.cluster.local", Metadata: md}
}

// waitRoute waits until route http.80 sends host's requests to cluster.
func waitRoute(t *testing.T, c *adsc.Client, host, cluster string) {
	t.Helper()
	bootstraptest.WaitClient(t, c, "route http.80: "+host+" to "+cluster, func(c *adsc.Client) bool {
		a := c.Resources(model.RouteType)["http.80"]
		if a == nil {
			return false
		}
		rc := &routev3.RouteConfiguration{}
		if err := a.UnmarshalTo(rc); err != nil {
			return false
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if strings.HasPrefix(vh.GetName(), host+":") && r.GetRoute().GetCluster() == cluster {
					return true
				}
			}
		}
		return false
	})
}

const fileGatewayAPIYAML = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: gwfile}
spec:
  clusterIP: 10.96.7.7
  ports: [{name: http, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: istio}
spec: {controllerName: istio.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: gwfile}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
`

func fileRoute(host string) string {
	return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: gwfile}
spec:
  parentRefs: [{name: gw}]
  hostnames: [` + host + `]
  rules:
  - backendRefs: [{name: web, port: 8080}]
`
}

// TestFileModeGatewayAPI: in a config directory, a Gateway of class istio
// and an HTTPRoute give the Gateway's proxy its route (file mode is the
// same source as a cluster); rewriting the HTTPRoute's file pushes the
// new host.
func TestFileModeGatewayAPI(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, dir, "gateway.yaml", fileGatewayAPIYAML)
	writeAtomic(t, dir, "route.yaml", fileRoute("a.example.com"))
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	srv := bootstraptest.Start(t, opts)
	c := bootstraptest.RunClient(t, srv, adsc.Config{
		Node:  gatewayNode(t, "gwfile", "gw", "10.244.3.2"),
		Types: []string{model.ClusterType, model.ListenerType, model.RouteType},
	})
	const cluster = "outbound|8080||web.gwfile.svc.cluster.local"
	waitRoute(t, c, "a.example.com", cluster)
	writeAtomic(t, dir, "route.yaml", fileRoute("b.example.com"))
	waitRoute(t, c, "b.example.com", cluster)
}
