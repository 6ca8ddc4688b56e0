package helm

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/serviceregistry/multicluster"
)

// TestRemoteChart: charts/meshpilot-remote installs Istio's reader with
// Istio's names, granting exactly what a remote cluster's registry reads
// (multicluster.ReaderRules), and the token Secret create-remote-secret reads.
func TestRemoteChart(t *testing.T) {
	dir := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot-remote")
	out := runHelm(t, "lint", "--strict", "--kube-version", kubetest.KubeVersion, dir)
	if !strings.Contains(out, "0 chart(s) failed") {
		t.Errorf("helm lint:\n%s", out)
	}
	objs, err := decodeAll(runHelm(t, "template", "reader", dir, "--namespace", releaseNS, "--kube-version", kubetest.KubeVersion))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, kindOf(o))
	}
	slices.Sort(kinds)
	if diff := cmp.Diff([]string{"ClusterRole", "ClusterRoleBinding", "Secret", "ServiceAccount"}, kinds); diff != "" {
		t.Fatalf("kinds (-want +got):\n%s", diff)
	}
	sa := only[*corev1.ServiceAccount](t, objs)
	if sa.Name != multicluster.ReaderServiceAccount || sa.Namespace != releaseNS {
		t.Errorf("service account %s/%s, want %s/%s", sa.Namespace, sa.Name, releaseNS, multicluster.ReaderServiceAccount)
	}
	role := only[*rbacv1.ClusterRole](t, objs)
	if role.Name != multicluster.ReaderClusterRole(releaseNS) {
		t.Errorf("ClusterRole %s, want %s", role.Name, multicluster.ReaderClusterRole(releaseNS))
	}
	got := sortedAccess(expandRules(t, "ClusterRole", role.Name, role.Rules, ""))
	want := sortedAccess(expandRules(t, "ReaderRules", "", multicluster.ReaderRules(), ""))
	if missing, extra := diffAccess(got, want); len(missing)+len(extra) > 0 {
		t.Errorf("istio-reader ClusterRole lacks %v, has too much %v", missing, extra)
	}
	binding := only[*rbacv1.ClusterRoleBinding](t, objs)
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != releaseNS {
		t.Errorf("binding %+v does not bind %s to %s", binding, sa.Name, role.Name)
	}
	token := only[*corev1.Secret](t, objs)
	if token.Type != corev1.SecretTypeServiceAccountToken || token.Annotations[corev1.ServiceAccountNameKey] != sa.Name ||
		token.Name != sa.Name+"-istio-remote-secret-token" {
		t.Errorf("token secret %s (%s, %v), want %s-istio-remote-secret-token for %s", token.Name, token.Type, token.Annotations, sa.Name, sa.Name)
	}
}

// TestMultiClusterOffDropsSecretList: multiCluster.enabled=false grants no
// list or watch on Secrets in the release namespace.
func TestMultiClusterOffDropsSecretList(t *testing.T) {
	role := only[*rbacv1.Role](t, render(t, "multiCluster.enabled=false"))
	for _, a := range expandRules(t, "Role", role.Name, role.Rules, releaseNS) {
		if a.Resource == "secrets" && (a.Verb == "list" || a.Verb == "watch") {
			t.Errorf("multiCluster.enabled=false still grants %s", a)
		}
	}
}
