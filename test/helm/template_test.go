package helm

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
)

func TestLint(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
	}{
		{"defaults", nil},
		{"no autoscaling or PDB", []string{"autoscaling.enabled=false", "podDisruptionBudget.enabled=false"}},
		{"revision and meshpilot agent", []string{"revision=canary", "sidecarInjector.agentImage=meshpilot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"lint", "--strict", "--kube-version", kubetest.KubeVersion, chartDir(t)}
			for _, s := range tc.sets {
				args = append(args, "--set", s)
			}
			out := runHelm(t, args...)
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Errorf("helm lint output does not report success:\n%s", out)
			}
		})
	}
}

func TestTemplateDefaults(t *testing.T) {
	objs := render(t)

	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, kindOf(o))
		if m, ok := o.(metav1.Object); ok {
			if ns := m.GetNamespace(); ns != "" && ns != releaseNS {
				t.Errorf("%s %s: namespace %q, want %q", kindOf(o), m.GetName(), ns, releaseNS)
			}
		}
	}
	slices.Sort(kinds)
	wantKinds := []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "ConfigMap", "Deployment", "HorizontalPodAutoscaler",
		"MutatingWebhookConfiguration", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount",
		"ValidatingWebhookConfiguration"}
	if diff := cmp.Diff(wantKinds, kinds); diff != "" {
		t.Fatalf("rendered kinds (-want +got):\n%s", diff)
	}

	sa := only[*corev1.ServiceAccount](t, objs)
	if sa.Name != "istiod" {
		t.Errorf("ServiceAccount name %q, want istiod", sa.Name)
	}
	dep := only[*appsv1.Deployment](t, objs)
	checkDeployment(t, dep, sa.Name, "ghcr.io/meshpilot/pilot-discovery:0.1.0-dev")
	if dep.Spec.Replicas != nil {
		t.Errorf("Deployment sets replicas %d while the HPA owns them", *dep.Spec.Replicas)
	}

	svc := only[*corev1.Service](t, objs)
	if svc.Name != "istiod" {
		t.Errorf("Service name %q, want istiod", svc.Name)
	}
	type port struct {
		Port   int32
		Target intstr.IntOrString
	}
	gotPorts := map[string]port{}
	for _, p := range svc.Spec.Ports {
		gotPorts[p.Name] = port{p.Port, p.TargetPort}
	}
	wantPorts := map[string]port{
		"grpc-xds":        {15010, intstr.FromInt32(15010)},
		"https-dns":       {15012, intstr.FromInt32(15012)},
		"https-webhook":   {443, intstr.FromInt32(15017)},
		"http-monitoring": {15014, intstr.FromInt32(15014)},
	}
	if diff := cmp.Diff(wantPorts, gotPorts); diff != "" {
		t.Errorf("Service ports (-want +got):\n%s", diff)
	}
	if !selects(svc.Spec.Selector, dep.Spec.Template.Labels) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, dep.Spec.Template.Labels)
	}

	pdb := only[*policyv1.PodDisruptionBudget](t, objs)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB minAvailable %v, want 1", pdb.Spec.MinAvailable)
	}
	if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
		t.Errorf("PDB selector %v does not select the pods", pdb.Spec.Selector)
	}

	hpa := only[*autoscalingv2.HorizontalPodAutoscaler](t, objs)
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != dep.Name {
		t.Errorf("HPA targets %+v, want Deployment %s", hpa.Spec.ScaleTargetRef, dep.Name)
	}
	if len(hpa.Spec.Metrics) != 1 || hpa.Spec.Metrics[0].Resource == nil ||
		hpa.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU ||
		hpa.Spec.Metrics[0].Resource.Target.AverageUtilization == nil ||
		*hpa.Spec.Metrics[0].Resource.Target.AverageUtilization != 80 {
		t.Errorf("HPA metrics %+v, want CPU utilisation 80%%", hpa.Spec.Metrics)
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != 1 || hpa.Spec.MaxReplicas != 5 {
		t.Errorf("HPA replicas %v..%d, want 1..5", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}

	checkMeshConfig(t, named[*corev1.ConfigMap](t, objs, "istio"), "istio-system", "istiod.istio-system.svc:15012")
	checkRBAC(t, objs, sa)
}

func TestTemplateOverrides(t *testing.T) {
	objs := render(t,
		"name=meshpilot",
		"image.hub=registry.example/mesh",
		"image.tag=1.2.3",
		"autoscaling.enabled=false",
		"podDisruptionBudget.enabled=false",
		"replicaCount=3",
		"discovery.env.PILOT_DEBOUNCE_AFTER=250ms",
		"discovery.env.PILOT_PUSH_THROTTLE=50",
		"meshConfig.rootNamespace=mesh-root",
	)
	if n := len(all[*autoscalingv2.HorizontalPodAutoscaler](objs)); n != 0 {
		t.Errorf("autoscaling disabled but %d HPA rendered", n)
	}
	if n := len(all[*policyv1.PodDisruptionBudget](objs)); n != 0 {
		t.Errorf("PDB disabled but %d rendered", n)
	}
	sa := only[*corev1.ServiceAccount](t, objs)
	if sa.Name != "meshpilot" {
		t.Errorf("ServiceAccount name %q, want meshpilot", sa.Name)
	}
	if svc := only[*corev1.Service](t, objs); svc.Name != "meshpilot" {
		t.Errorf("Service name %q, want meshpilot", svc.Name)
	}
	dep := only[*appsv1.Deployment](t, objs)
	checkDeployment(t, dep, "meshpilot", "registry.example/mesh/pilot-discovery:1.2.3")
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("Deployment replicas %v, want 3", dep.Spec.Replicas)
	}
	env := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["PILOT_DEBOUNCE_AFTER"] != "250ms" || env["PILOT_PUSH_THROTTLE"] != "50" {
		t.Errorf("discovery.env not passed through: %v", env)
	}
	// A user's rootNamespace wins; the discovery address follows the name.
	checkMeshConfig(t, named[*corev1.ConfigMap](t, objs, "istio"), "mesh-root", "meshpilot.istio-system.svc:15012")
	checkRBAC(t, objs, sa)
}

// TestTemplateDebugAddress: discovery.debug.address sets --debugAddr;
// empty leaves it out (debug on 8080, as istiod); /ready stays the probe.
func TestTemplateDebugAddress(t *testing.T) {
	for value, want := range map[string]string{"0.0.0.0:9999": "--debugAddr=0.0.0.0:9999", "": ""} {
		c := only[*appsv1.Deployment](t, render(t, "discovery.debug.address="+value)).Spec.Template.Spec.Containers[0]
		var got []string
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--debugAddr") {
				got = append(got, a)
			}
		}
		if want == "" && len(got) != 0 || want != "" && (len(got) != 1 || got[0] != want) {
			t.Errorf("discovery.debug.address=%q: args %v, want %q", value, got, want)
		}
		if rp := c.ReadinessProbe; rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/ready" || rp.HTTPGet.Port != intstr.FromInt32(8080) {
			t.Errorf("discovery.debug.address=%q: readinessProbe %+v", value, rp)
		}
	}
}

// TestTemplateMaxConnectionAge: discovery.keepaliveMaxServerConnectionAge
// (Istio's pilot.keepaliveMaxServerConnectionAge, 30m by default) becomes
// --keepaliveMaxServerConnectionAge, as istiod's chart passes it; empty
// leaves the flag out (connections never age out).
func TestTemplateMaxConnectionAge(t *testing.T) {
	for value, want := range map[string][]string{"": nil, "5m": {"--keepaliveMaxServerConnectionAge", "5m"}} {
		args := only[*appsv1.Deployment](t, render(t, "discovery.keepaliveMaxServerConnectionAge="+value)).Spec.Template.Spec.Containers[0].Args
		i := slices.Index(args, "--keepaliveMaxServerConnectionAge")
		var got []string
		if i >= 0 && i+1 < len(args) {
			got = args[i : i+2]
		}
		if !slices.Equal(got, want) {
			t.Errorf("discovery.keepaliveMaxServerConnectionAge=%q: args %v, want %v", value, args, want)
		}
	}
}

func TestTemplateRejectsEmptyHub(t *testing.T) {
	_, err := tryHelm(t, "template", releaseName, chartDir(t), "--namespace", releaseNS,
		"--kube-version", kubetest.KubeVersion, "--set", "image.hub=")
	if err == nil || !strings.Contains(err.Error(), "image.hub must not be empty") {
		t.Fatalf("helm template with an empty image.hub: want an error naming image.hub, got %v", err)
	}
}

// checkDeployment asserts istiod's container contract: image, args, ports,
// readiness probe, downward-API env, hardening and the mesh config mount.
func checkDeployment(t *testing.T, dep *appsv1.Deployment, serviceAccount, image string) {
	t.Helper()
	spec := dep.Spec.Template.Spec
	if spec.ServiceAccountName != serviceAccount {
		t.Errorf("serviceAccountName %q, want %q", spec.ServiceAccountName, serviceAccount)
	}
	if dep.Spec.Selector == nil || !selects(dep.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
		t.Errorf("Deployment selector %v does not select its own pods %v", dep.Spec.Selector, dep.Spec.Template.Labels)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != image {
		t.Errorf("image %q, want %q", c.Image, image)
	}
	wantArgs := []string{"discovery", "--monitoringAddr=:15014", "--log_output_level=default:info",
		"--domain", "cluster.local", "--meshConfig=/etc/istio/config/mesh",
		"--networksConfig=/etc/istio/config/meshNetworks", "--namespace=" + releaseNS,
		"--clusterID=Kubernetes", "--keepaliveMaxServerConnectionAge", "30m", "--debugAddr=127.0.0.1:8081"}
	if diff := cmp.Diff(wantArgs, c.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	var ports []int32
	for _, p := range c.Ports {
		ports = append(ports, p.ContainerPort)
	}
	if diff := cmp.Diff([]int32{8080, 15010, 15012, 15014, 15017}, ports); diff != "" {
		t.Errorf("container ports (-want +got):\n%s", diff)
	}
	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/ready" || rp.HTTPGet.Port != intstr.FromInt32(8080) {
		t.Errorf("readinessProbe %+v, want httpGet /ready on 8080", rp)
	}
	fieldRefs := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fieldRefs[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if fieldRefs["POD_NAME"] != "metadata.name" || fieldRefs["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("POD_NAME/POD_NAMESPACE downward API env missing: %v", fieldRefs)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v: want non-root, read-only root fs, no escalation, drop ALL", sc)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod securityContext %+v: want a non-root user", psc)
	}
	if c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("no CPU request: the HPA's utilisation target needs one")
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/etc/istio/config" {
			for _, v := range spec.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == "istio" {
					mounted = true
				}
			}
		}
	}
	if !mounted {
		t.Errorf("ConfigMap istio is not mounted at /etc/istio/config")
	}
}

// checkMeshConfig asserts ConfigMap "istio" carries a "mesh" that
// pilot-discovery itself accepts (strict MeshConfig parsing).
func checkMeshConfig(t *testing.T, cm *corev1.ConfigMap, rootNS, discoveryAddr string) {
	t.Helper()
	if cm.Name != "istio" {
		t.Errorf("mesh ConfigMap name %q, want istio", cm.Name)
	}
	path := filepath.Join(t.TempDir(), "mesh")
	if err := os.WriteFile(path, []byte(cm.Data["mesh"]), 0o600); err != nil {
		t.Fatal(err)
	}
	mesh, fromFile, err := bootstrap.LoadMeshConfig(path)
	if err != nil || !fromFile {
		t.Fatalf("pilot-discovery rejects the chart's mesh config (fromFile=%v): %v\n%s", fromFile, err, cm.Data["mesh"])
	}
	if mesh.GetRootNamespace() != rootNS {
		t.Errorf("rootNamespace %q, want %q", mesh.GetRootNamespace(), rootNS)
	}
	if got := mesh.GetDefaultConfig().GetDiscoveryAddress(); got != discoveryAddr {
		t.Errorf("defaultConfig.discoveryAddress %q, want %q", got, discoveryAddr)
	}
	if mesh.GetTrustDomain() != "cluster.local" {
		t.Errorf("trustDomain %q, want cluster.local", mesh.GetTrustDomain())
	}
}

// checkRBAC asserts the rendered roles grant exactly the expected access and
// are bound to the chart's ServiceAccount.
func checkRBAC(t *testing.T, objs []runtime.Object, sa *corev1.ServiceAccount) {
	t.Helper()
	cr := only[*rbacv1.ClusterRole](t, objs)
	role := only[*rbacv1.Role](t, objs)
	got := expandRules(t, "ClusterRole", cr.Name, cr.Rules, "")
	got = append(got, expandRules(t, "Role", role.Name, role.Rules, role.Namespace)...)
	missing, extra := diffAccess(sortedAccess(got), wantAccess(sa.Namespace))
	for _, m := range missing {
		t.Errorf("RBAC does not grant %s", m)
	}
	for _, e := range extra {
		t.Errorf("RBAC grants more than pilot-discovery uses: %s", e)
	}
	crb := only[*rbacv1.ClusterRoleBinding](t, objs)
	rb := only[*rbacv1.RoleBinding](t, objs)
	wantSubject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != cr.Name || !slices.Equal(crb.Subjects, wantSubject) {
		t.Errorf("ClusterRoleBinding %s: roleRef %+v subjects %+v, want ClusterRole %s for %+v", crb.Name, crb.RoleRef, crb.Subjects, cr.Name, wantSubject)
	}
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || !slices.Equal(rb.Subjects, wantSubject) || rb.Namespace != role.Namespace {
		t.Errorf("RoleBinding %s: roleRef %+v subjects %+v, want Role %s for %+v", rb.Name, rb.RoleRef, rb.Subjects, role.Name, wantSubject)
	}
}

// selects reports whether every selector label is on the pod.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// kindOf is an object's Go type name, which for the typed API objects here
// is its Kind.
func kindOf(o runtime.Object) string {
	return reflect.TypeOf(o).Elem().Name()
}
