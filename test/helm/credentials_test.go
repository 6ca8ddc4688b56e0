package helm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
)

// Log lines of pilot/config/secrets and pilot/bootstrap telling whether
// Secrets are watched for Gateway credentialNames.
const (
	secretsWatchedLog = "watching secrets for gateway credentials"
	credentialsOffLog = "gateway credentials off"
)

const credentialsOff = "gateways.credentials.enabled=false"

// credentialsEnv returns the Deployment's PILOT_ENABLE_GATEWAY_CREDENTIALS.
func credentialsEnv(t *testing.T, dep *appsv1.Deployment) string {
	t.Helper()
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "PILOT_ENABLE_GATEWAY_CREDENTIALS" {
			return e.Value
		}
	}
	t.Fatal("Deployment sets no PILOT_ENABLE_GATEWAY_CREDENTIALS")
	return ""
}

// TestTemplateGatewayCredentials: by default the ClusterRole grants
// secrets get/list/watch and the Deployment sets
// PILOT_ENABLE_GATEWAY_CREDENTIALS=true; gateways.credentials.enabled=false
// removes exactly that rule and sets it to false.
func TestTemplateGatewayCredentials(t *testing.T) {
	for _, tc := range []struct {
		sets    []string
		on      bool
		wantEnv string
	}{{nil, true, "true"}, {[]string{credentialsOff}, false, "false"}} {
		objs := render(t, tc.sets...)
		if got := credentialsEnv(t, only[*appsv1.Deployment](t, objs)); got != tc.wantEnv {
			t.Errorf("%v: PILOT_ENABLE_GATEWAY_CREDENTIALS=%q, want %q", tc.sets, got, tc.wantEnv)
		}
		cr := only[*rbacv1.ClusterRole](t, objs)
		role := only[*rbacv1.Role](t, objs)
		got := expandRules(t, "ClusterRole", cr.Name, cr.Rules, "")
		got = append(got, expandRules(t, "Role", role.Name, role.Rules, role.Namespace)...)
		missing, extra := diffAccess(sortedAccess(got), wantAccessFor(releaseNS, tc.on))
		for _, m := range missing {
			t.Errorf("%v: RBAC does not grant %s", tc.sets, m)
		}
		for _, e := range extra {
			t.Errorf("%v: RBAC grants more than pilot-discovery uses: %s", tc.sets, e)
		}
	}
}

// checkCredentialsOff upgrades the installed release with
// gateways.credentials.enabled=false, checks the ServiceAccount can no
// longer list or read Secrets outside its own rights, and that
// pilot-discovery run with the Deployment's environment syncs without any
// denial and without starting the Secret informer.
func checkCredentialsOff(ctx context.Context, t *testing.T, env *kubetest.Env, saClient kubernetes.Interface) {
	t.Helper()
	runHelm(t, "upgrade", releaseName, chartDir(t),
		"--kubeconfig", env.Kubeconfig(), "--namespace", releaseNS, "--wait=false", "--set", credentialsOff)
	// The authorizer follows the ClusterRole's update through its informer.
	for _, a := range credentialsOffDenied {
		testutil.Eventually(t, time.Minute, fmt.Sprintf("with %s the ServiceAccount cannot %s", credentialsOff, a), func() bool {
			allowed, _ := review(ctx, t, saClient, a)
			return !allowed
		})
	}
	logs := runDiscoveryAsServiceAccount(t, env, true, credentialsOff)
	if strings.Contains(logs, secretsWatchedLog) {
		t.Errorf("with %s pilot-discovery started the Secret informer", credentialsOff)
	}
	if !strings.Contains(logs, credentialsOffLog) {
		t.Errorf("with %s pilot-discovery did not log %q", credentialsOff, credentialsOffLog)
	}
}
