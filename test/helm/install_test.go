package helm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// TestInstall installs the chart into a real kube-apiserver (every object
// must be accepted by the server's validation), checks the objects and CRDs
// exist, then checks the chart's ServiceAccount can do exactly what
// pilot-discovery needs, that pilot-discovery itself syncs with it, and
// that upgrade and uninstall work.
func TestInstall(t *testing.T) {
	env := kubetest.Start(t)
	runHelm(t, "install", releaseName, chartDir(t),
		"--kubeconfig", env.Kubeconfig(),
		"--namespace", releaseNS, "--create-namespace",
		"--wait=false", "--timeout", "3m")

	cs := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("objects exist", func(t *testing.T) {
		for _, obj := range render(t) {
			if err := getObject(ctx, cs, obj); err != nil {
				t.Errorf("after helm install: %v", err)
			}
		}
	})

	t.Run("CRDs established", func(t *testing.T) {
		for _, c := range chartCRDs(t) {
			path := "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + c.Metadata.Name
			if err := cs.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).Error(); err != nil {
				t.Errorf("CRD %s: %v", c.Metadata.Name, err)
			}
		}
		// The served API answers a list of an Istio kind.
		path := "/apis/networking.istio.io/v1/namespaces/default/virtualservices"
		if err := waitFor(ctx, func() error {
			return cs.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).Error()
		}); err != nil {
			t.Errorf("GET %s: %v", path, err)
		}
	})

	saClient := serviceAccountClient(t, env)

	t.Run("access review", func(t *testing.T) {
		for _, a := range wantAccess(releaseNS) {
			// A namespaced right granted cluster-wide holds in any namespace;
			// probe "default" for those to show it is not limited to ours.
			probe := a
			if probe.Namespace == "" && namespacedResource(a.Resource) {
				probe.Namespace = "default"
			}
			if allowed, reason := review(ctx, t, saClient, probe); !allowed {
				t.Errorf("ServiceAccount %s/istiod cannot %s: %s", releaseNS, probe, reason)
			}
		}
		for _, a := range deniedAccess {
			if allowed, _ := review(ctx, t, saClient, a); allowed {
				t.Errorf("ServiceAccount %s/istiod can %s, which pilot-discovery does not need", releaseNS, a)
			}
		}
	})

	t.Run("pilot-discovery syncs as the ServiceAccount", func(t *testing.T) {
		logs := runDiscoveryAsServiceAccount(t, env, false)
		// Gateway credentials (the default): the Secret informer listed
		// every namespace without a denial.
		if !strings.Contains(logs, secretsWatchedLog) {
			t.Errorf("pilot-discovery did not start the Secret informer (no %q in its logs)", secretsWatchedLog)
		}
	})

	t.Run("gateway credentials off", func(t *testing.T) {
		checkCredentialsOff(ctx, t, env, saClient)
	})

	t.Run("upgrade and uninstall", func(t *testing.T) {
		runHelm(t, "upgrade", releaseName, chartDir(t),
			"--kubeconfig", env.Kubeconfig(), "--namespace", releaseNS, "--wait=false",
			"--set", "autoscaling.enabled=false", "--set", "replicaCount=2")
		dep, err := cs.AppsV1().Deployments(releaseNS).Get(ctx, "istiod", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Deployment after upgrade: %v", err)
		}
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
			t.Errorf("replicas after upgrade %v, want 2", dep.Spec.Replicas)
		}
		if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers(releaseNS).Get(ctx, "istiod", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("HPA after disabling autoscaling: want NotFound, got %v", err)
		}

		runHelm(t, "uninstall", releaseName, "--kubeconfig", env.Kubeconfig(), "--namespace", releaseNS, "--wait=false")
		if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "istiod-clusterrole-"+releaseNS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRole after uninstall: want NotFound, got %v", err)
		}
		if _, err := cs.CoreV1().Services(releaseNS).Get(ctx, "istiod", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Service after uninstall: want NotFound, got %v", err)
		}
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("MutatingWebhookConfiguration after uninstall: want NotFound, got %v", err)
		}
		// Helm never deletes crds/: users' Istio objects survive an uninstall.
		path := "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualservices.networking.istio.io"
		if err := cs.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).Error(); err != nil {
			t.Errorf("CRD after uninstall: %v", err)
		}
	})
}

// serviceAccountClient is a clientset authenticated with a TokenRequest
// token of the chart's ServiceAccount, through a kubeconfig file as
// pilot-discovery would get one.
func serviceAccountClient(t *testing.T, env *kubetest.Env) kubernetes.Interface {
	t.Helper()
	kubeconfig := env.KubeconfigFor(t, env.ServiceAccountToken(t, releaseNS, "istiod"))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 100, 200 // dozens of reviews; client-go's default is 5/s
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// review asks the API server's authorizer whether the caller may do a.
func review(ctx context.Context, t *testing.T, cs kubernetes.Interface, a access) (bool, string) {
	t.Helper()
	resource, sub, _ := strings.Cut(a.Resource, "/")
	ssar := &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: a.Group, Resource: resource, Subresource: sub, Verb: a.Verb, Namespace: a.Namespace,
			},
		},
	}
	res, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, ssar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectAccessReview for %s: %v", a, err)
	}
	return res.Status.Allowed, res.Status.Reason
}

// namespacedResource reports whether a resource the chart grants lives in
// namespaces (for choosing a probe namespace).
func namespacedResource(resource string) bool {
	switch resource {
	case "nodes", "namespaces", "customresourcedefinitions", "tokenreviews", "subjectaccessreviews":
		return false
	}
	return true
}

// getObject reads back a rendered object from the API server.
func getObject(ctx context.Context, cs kubernetes.Interface, obj runtime.Object) error {
	m, ok := obj.(metav1.Object)
	if !ok {
		return fmt.Errorf("%T has no metadata", obj)
	}
	ns, name := m.GetNamespace(), m.GetName()
	var err error
	switch obj.(type) {
	case *corev1.ServiceAccount:
		_, err = cs.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
	case *corev1.ConfigMap:
		_, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	case *corev1.Service:
		_, err = cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	case *appsv1.Deployment:
		_, err = cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
	case *rbacv1.Role:
		_, err = cs.RbacV1().Roles(ns).Get(ctx, name, metav1.GetOptions{})
	case *rbacv1.RoleBinding:
		_, err = cs.RbacV1().RoleBindings(ns).Get(ctx, name, metav1.GetOptions{})
	case *policyv1.PodDisruptionBudget:
		_, err = cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
	case *autoscalingv2.HorizontalPodAutoscaler:
		_, err = cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, name, metav1.GetOptions{})
	case *admissionv1.MutatingWebhookConfiguration:
		_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	case *admissionv1.ValidatingWebhookConfiguration:
		_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	default:
		return fmt.Errorf("%s %s/%s: no reader for this kind in the test", kindOf(obj), ns, name)
	}
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", kindOf(obj), ns, name, err)
	}
	return nil
}

// waitFor polls fn until it succeeds or ctx ends, returning the last error.
func waitFor(ctx context.Context, fn func() error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}
