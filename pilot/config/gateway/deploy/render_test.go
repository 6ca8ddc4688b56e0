package deploy_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/internal/injectfixture"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	"github.com/meshpilot/meshpilot/pilot/config/gateway/deploy"
	"github.com/meshpilot/meshpilot/pilot/webhook/inject"
)

func testGateway(name string, listeners ...gwv1.Listener) *gwv1.Gateway {
	if len(listeners) == 0 {
		listeners = []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}
	}
	return &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: "uid-1"},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: listeners},
	}
}

func render(t *testing.T, gw *gwv1.Gateway) *deploy.Objects {
	t.Helper()
	objs, err := deploy.Render(gw)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestRenderDefaults(t *testing.T) {
	gw := testGateway("web",
		gwv1.Listener{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
		gwv1.Listener{Name: "https.example", Port: 443, Protocol: gwv1.HTTPSProtocolType},
		gwv1.Listener{Name: "http-other-host", Port: 80, Protocol: gwv1.HTTPProtocolType})
	objs := render(t, gw)
	for what, name := range map[string]*string{"ServiceAccount": objs.ServiceAccount.Name, "Deployment": objs.Deployment.Name, "Service": objs.Service.Name} {
		if *name != "web-istio" {
			t.Errorf("%s name %q, want web-istio", what, *name)
		}
	}
	for what, labels := range map[string]map[string]string{
		"ServiceAccount": objs.ServiceAccount.Labels, "Deployment": objs.Deployment.Labels,
		"Service": objs.Service.Labels, "pod": objs.Deployment.Spec.Template.Labels,
	} {
		for k, v := range map[string]string{deploy.GatewayNameLabel: "web", deploy.IstioGatewayNameLabel: "web", deploy.ManagedLabel: deploy.ManagedValue} {
			if labels[k] != v {
				t.Errorf("%s label %s=%q, want %q", what, k, labels[k], v)
			}
		}
	}
	owner := objs.Deployment.OwnerReferences
	if len(owner) != 1 || *owner[0].Kind != "Gateway" || *owner[0].Name != "web" || *owner[0].UID != "uid-1" || *owner[0].APIVersion != "gateway.networking.k8s.io/v1" {
		t.Errorf("owner references %+v", owner)
	}
	tmpl := objs.Deployment.Spec.Template
	if tmpl.Annotations["inject.istio.io/templates"] != "gateway" || tmpl.Labels["sidecar.istio.io/inject"] != "true" {
		t.Errorf("pod template metadata: labels %v annotations %v", tmpl.Labels, tmpl.Annotations)
	}
	if *tmpl.Spec.ServiceAccountName != "web-istio" {
		t.Errorf("serviceAccountName %q", *tmpl.Spec.ServiceAccountName)
	}
	if objs.Deployment.Spec.Selector.MatchLabels[deploy.GatewayNameLabel] != "web" {
		t.Errorf("selector %v", objs.Deployment.Spec.Selector.MatchLabels)
	}
	spec := objs.Service.Spec
	if *spec.Type != corev1.ServiceTypeLoadBalancer || spec.LoadBalancerIP != nil {
		t.Errorf("service type %v loadBalancerIP %v", *spec.Type, spec.LoadBalancerIP)
	}
	var ports []string
	for _, p := range spec.Ports {
		ports = append(ports, fmt.Sprintf("%s/%d/%s", *p.Name, *p.Port, *p.AppProtocol))
	}
	want := []string{"status-port/15021/tcp", "http/80/http", "https-example/443/https"}
	if !slices.Equal(ports, want) {
		t.Errorf("ports %v, want %v", ports, want)
	}
}

func TestRenderServiceTypeAddressesInfrastructure(t *testing.T) {
	gw := testGateway("web")
	gw.Annotations = map[string]string{deploy.ServiceTypeAnnotation: "ClusterIP", "kubectl.kubernetes.io/last-applied-configuration": "{}"}
	gw.Labels = map[string]string{"team": "a"}
	objs := render(t, gw)
	if *objs.Service.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("type %v", *objs.Service.Spec.Type)
	}
	// Without spec.infrastructure the Gateway's own labels and annotations
	// are copied (istiod's default), minus the controller's.
	if objs.Deployment.Labels["team"] != "a" || objs.Service.Annotations[deploy.ServiceTypeAnnotation] != "ClusterIP" {
		t.Errorf("copied metadata: labels %v annotations %v", objs.Deployment.Labels, objs.Service.Annotations)
	}
	if _, ok := objs.Service.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; ok {
		t.Error("last-applied-configuration copied")
	}

	gw = testGateway("web")
	gw.Labels = map[string]string{"team": "a"}
	gw.Spec.Infrastructure = &gwv1.GatewayInfrastructure{
		Labels:      map[gwv1.LabelKey]gwv1.LabelValue{"tier": "edge", "gateway.networking.k8s.io/gateway-name": "evil"},
		Annotations: map[gwv1.AnnotationKey]gwv1.AnnotationValue{"cloud/lb": "internal"},
	}
	gw.Spec.Addresses = []gwv1.GatewaySpecAddress{{Value: "10.1.2.3"}}
	objs = render(t, gw)
	for what, l := range map[string]map[string]string{"sa": objs.ServiceAccount.Labels, "dep": objs.Deployment.Labels, "svc": objs.Service.Labels, "pod": objs.Deployment.Spec.Template.Labels} {
		if l["tier"] != "edge" || l["team"] != "" || l[deploy.GatewayNameLabel] != "web" {
			t.Errorf("%s labels %v", what, l)
		}
	}
	if objs.Service.Annotations["cloud/lb"] != "internal" || objs.Deployment.Spec.Template.Annotations["cloud/lb"] != "internal" {
		t.Errorf("annotations %v", objs.Service.Annotations)
	}
	if lb := objs.Service.Spec.LoadBalancerIP; lb == nil || *lb != "10.1.2.3" {
		t.Errorf("loadBalancerIP %v", lb)
	}
}

func TestControllerName(t *testing.T) {
	if deploy.ControllerName != gateway.ControllerName {
		t.Errorf("deploy.ControllerName %q, gateway.ControllerName %q", deploy.ControllerName, gateway.ControllerName)
	}
}

func TestManaged(t *testing.T) {
	ip, host := gwv1.IPAddressType, gwv1.HostnameAddressType
	for _, c := range []struct {
		addrs []gwv1.GatewaySpecAddress
		want  bool
	}{
		{nil, true},
		{[]gwv1.GatewaySpecAddress{{Value: "1.2.3.4"}}, true},
		{[]gwv1.GatewaySpecAddress{{Type: &ip, Value: "1.2.3.4"}}, true},
		{[]gwv1.GatewaySpecAddress{{Type: &host, Value: "ingress.istio-system.svc.cluster.local"}}, false},
		{[]gwv1.GatewaySpecAddress{{Value: "1.2.3.4"}, {Value: "1.2.3.5"}}, false},
	} {
		gw := testGateway("web")
		gw.Spec.Addresses = c.addrs
		if got := deploy.Managed(gw); got != c.want {
			t.Errorf("Managed(%v) = %v, want %v", c.addrs, got, c.want)
		}
	}
}

// Hostile names: everything made is a valid Kubernetes name, or the
// Gateway is refused with a reason.
func TestRenderHostileNames(t *testing.T) {
	long := strings.Repeat("a", 60)
	for _, name := range []string{long, "my.gateway", "1gw", strings.Repeat("b.", 30) + "c"} {
		objs := render(t, testGateway(name))
		n := *objs.Service.Name
		if msgs := validation.IsDNS1035Label(n); len(msgs) > 0 {
			t.Errorf("gateway %q: service name %q invalid: %v", name, n, msgs)
		}
		if deploy.Name(testGateway(name)) != n {
			t.Errorf("Name differs from the rendered name")
		}
	}
	// Names cut to 63 characters stay distinct.
	if deploy.Name(testGateway(long+"a")) == deploy.Name(testGateway(long+"b")) {
		t.Error("two long names collide")
	}
	bad := map[string]func(*gwv1.Gateway){
		"name longer than a label value": func(gw *gwv1.Gateway) { gw.Name = strings.Repeat("x", 64) },
		"service type": func(gw *gwv1.Gateway) {
			gw.Annotations = map[string]string{deploy.ServiceTypeAnnotation: "ExternalName"}
		},
		"name override":            func(gw *gwv1.Gateway) { gw.Annotations = map[string]string{deploy.NameOverrideAnnotation: "Not_Valid"} },
		"service account override": func(gw *gwv1.Gateway) { gw.Annotations = map[string]string{deploy.ServiceAccountAnnotation: "../x"} },
	}
	for what, mutate := range bad {
		gw := testGateway("web")
		mutate(gw)
		if _, err := deploy.Render(gw); err == nil {
			t.Errorf("%s: rendered, want an error", what)
		}
	}
	// Listener names too long or clashing for port names.
	objs := render(t, testGateway("web",
		gwv1.Listener{Name: gwv1.SectionName(strings.Repeat("l", 70)), Port: 80, Protocol: gwv1.HTTPProtocolType},
		gwv1.Listener{Name: gwv1.SectionName(strings.Repeat("l", 70) + ".x"), Port: 81, Protocol: gwv1.HTTPProtocolType},
		gwv1.Listener{Name: "status-port", Port: 82, Protocol: gwv1.HTTPProtocolType}))
	seen := map[string]bool{}
	for _, p := range objs.Service.Spec.Ports {
		if msgs := validation.IsDNS1123Label(*p.Name); len(msgs) > 0 || seen[*p.Name] {
			t.Errorf("port name %q: invalid %v or repeated", *p.Name, msgs)
		}
		seen[*p.Name] = true
	}
	if len(objs.Service.Spec.Ports) != 4 {
		t.Errorf("%d ports, want 4", len(objs.Service.Spec.Ports))
	}
}

// TestInjectedGatewayPod runs the Deployment's pod template through our
// injection webhook with Istio's default istio-sidecar-injector ConfigMap:
// the pod is selected (in a namespace without injection labels) and gets a
// runnable gateway proxy.
func TestInjectedGatewayPod(t *testing.T) {
	objs := render(t, testGateway("web"))
	raw, err := json.Marshal(objs.Deployment.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	var tmpl corev1.PodTemplateSpec
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Namespace, pod.GenerateName = "default", "web-istio-5d9f7c-"

	data := injectfixture.ConfigMaps(t, injectfixture.Dir(t))
	cfg, err := inject.ParseConfig(data["istio-sidecar-injector"]["config"], data["istio-sidecar-injector"]["values"])
	if err != nil {
		t.Fatal(err)
	}
	mesh, err := inject.ParseMesh(data["istio"]["mesh"])
	if err != nil {
		t.Fatal(err)
	}
	inj := inject.New(cfg, mesh, "")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if !cfg.ShouldInject("", ns, pod) {
		t.Fatal("the webhook does not select the gateway pod")
	}
	out, err := inj.Inject(pod, inject.Options{Namespace: ns, Workload: &inject.Workload{
		TypeMeta: metav1.TypeMeta{Kind: "Deployment", APIVersion: "apps/v1"}, Name: "web-istio", Namespace: "default",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Spec.Containers) != 1 || len(out.Spec.InitContainers) != 0 {
		t.Fatalf("containers %d, init containers %d: want the proxy only", len(out.Spec.Containers), len(out.Spec.InitContainers))
	}
	c := out.Spec.Containers[0]
	if c.Name != "istio-proxy" || !strings.Contains(c.Image, "/proxyv2:") {
		t.Errorf("container %s image %s, want istio-proxy with proxyv2", c.Name, c.Image)
	}
	if len(c.Args) < 2 || c.Args[0] != "proxy" || c.Args[1] != "router" {
		t.Errorf("args %v, want proxy router ...", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["ISTIO_META_WORKLOAD_NAME"] != "web-istio" || env["CA_ADDR"] == "" {
		t.Errorf("env %v", env)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Port.IntValue() != deploy.StatusPort {
		t.Errorf("readiness probe %+v, want /healthz/ready on %d", c.ReadinessProbe, deploy.StatusPort)
	}
	if out.Spec.ServiceAccountName != "web-istio" {
		t.Errorf("service account %q", out.Spec.ServiceAccountName)
	}
	if out.Annotations["sidecar.istio.io/status"] == "" {
		t.Error("no sidecar.istio.io/status annotation")
	}
}

func TestRenderParameters(t *testing.T) {
	gw := testGateway("web")
	params := map[string]string{
		deploy.OverlayHPA: "spec:\n  minReplicas: 2\n  maxReplicas: 5\n",
		deploy.OverlayPDB: "spec:\n  minAvailable: 1\n",
		deploy.OverlayDeployment: "spec:\n  template:\n    spec:\n      containers:\n      - name: istio-proxy\n" +
			"        resources:\n          requests:\n            cpu: 200m\n",
		deploy.OverlayService: "metadata:\n  annotations:\n    cloud/lb: internal\n",
	}
	objs, err := deploy.Render(gw, deploy.Overlay{Data: params})
	if err != nil {
		t.Fatal(err)
	}
	hpa := objs.HPA
	if hpa == nil || *hpa.Spec.MaxReplicas != 5 || *hpa.Spec.MinReplicas != 2 || *hpa.Spec.ScaleTargetRef.Name != "web-istio" ||
		*hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Labels[deploy.ManagedLabel] != deploy.ManagedValue || len(hpa.OwnerReferences) != 1 {
		t.Errorf("HPA %s", toJSON(t, hpa))
	}
	pdb := objs.PDB
	if pdb == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.Selector.MatchLabels[deploy.GatewayNameLabel] != "web" {
		t.Errorf("PDB %s", toJSON(t, pdb))
	}
	c := objs.Deployment.Spec.Template.Spec.Containers
	if len(c) != 1 || *c[0].Image != "auto" || c[0].Resources.Requests.Cpu().String() != "200m" {
		t.Errorf("containers %s", toJSON(t, c))
	}
	if objs.Service.Annotations["cloud/lb"] != "internal" || objs.Service.Labels[deploy.GatewayNameLabel] != "web" {
		t.Errorf("service metadata %s", toJSON(t, objs.Service.ObjectMetaApplyConfiguration))
	}
	if objs, err := deploy.Render(gw, deploy.Overlay{Data: map[string]string{}}); err != nil || objs.HPA != nil || objs.PDB != nil {
		t.Errorf("no keys: HPA %v PDB %v err %v, want none", objs.HPA, objs.PDB, err)
	}

	for what, bad := range map[string]map[string]string{
		"unknown key":     {"statefulset": "spec: {}"},
		"renames":         {deploy.OverlayService: "metadata:\n  name: other\n"},
		"changes owner":   {deploy.OverlayDeployment: "metadata:\n  ownerReferences:\n  - {apiVersion: v1, kind: ConfigMap, name: x, uid: u2}\n"},
		"not YAML":        {deploy.OverlayPDB: "spec: [\n"},
		"wrong structure": {deploy.OverlayHPA: "spec: 3\n"},
	} {
		if _, err := deploy.Render(gw, deploy.Overlay{Data: bad}); err == nil {
			t.Errorf("%s: rendered, want an error", what)
		}
	}
	gw.Spec.Infrastructure = &gwv1.GatewayInfrastructure{ParametersRef: &gwv1.LocalParametersReference{Group: "example.com", Kind: "Params", Name: "p"}}
	if _, err := deploy.Parameters(gw); err == nil {
		t.Error("parametersRef to another kind accepted")
	}
	gw.Spec.Infrastructure.ParametersRef = &gwv1.LocalParametersReference{Kind: "ConfigMap", Name: "p"}
	if name, err := deploy.Parameters(gw); name != "p" || err != nil {
		t.Errorf("Parameters = %q, %v", name, err)
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRenderOverlaysLayered: the class defaults, then the Gateway's
// parameters, as istiod layers them; an error names its ConfigMap.
func TestRenderOverlaysLayered(t *testing.T) {
	gw := testGateway("web")
	class := deploy.Overlay{Source: "class defaults ConfigMap istio-system/d", Data: map[string]string{
		deploy.OverlayHPA: "spec:\n  minReplicas: 2\n  maxReplicas: 5\n",
		deploy.OverlayPDB: "spec:\n  minAvailable: 1\n",
	}}
	own := deploy.Overlay{Source: "infrastructure.parametersRef ConfigMap default/p", Data: map[string]string{
		deploy.OverlayHPA: "spec:\n  maxReplicas: 9\n",
	}}
	objs, err := deploy.Render(gw, class, own)
	if err != nil {
		t.Fatal(err)
	}
	if h := objs.HPA; h == nil || *h.Spec.MinReplicas != 2 || *h.Spec.MaxReplicas != 9 || *h.Spec.ScaleTargetRef.Name != "web-istio" {
		t.Errorf("HPA %s, want 2 to 9 replicas of web-istio", toJSON(t, h))
	}
	if objs.PDB == nil || objs.PDB.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB %s", toJSON(t, objs.PDB))
	}
	class.Data = map[string]string{"statefulset": "spec: {}"}
	if _, err := deploy.Render(gw, class, own); err == nil || !strings.Contains(err.Error(), class.Source) {
		t.Errorf("error %v, want one naming %q", err, class.Source)
	}
}
