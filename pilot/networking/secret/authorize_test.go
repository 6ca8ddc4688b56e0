package secret_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/secret"
)

// clock is a settable time for the decision cache.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestAccessReview asks a real API server: a ServiceAccount bound to a Role
// listing Secrets in namespace certs is allowed there, another one is not;
// decisions are cached for AuthzCacheTTL, then asked again.
func TestAccessReview(t *testing.T) {
	ctx := context.Background()
	client := env.Clientset()
	newNS := func(prefix string) string {
		ns, err := client.CoreV1().Namespaces().Create(ctx,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating namespace: %v", err)
		}
		return ns.Name
	}
	certs, gw := newNS("certs-"), newNS("gw-")
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-credentials", Namespace: certs},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}}},
	}
	if _, err := client.RbacV1().Roles(certs).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Role: %v", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress-reads-credentials", Namespace: certs},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "ingress", Namespace: gw}},
	}
	if _, err := client.RbacV1().RoleBindings(certs).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating RoleBinding: %v", err)
	}

	clk := &clock{now: time.Now()}
	a := secret.NewAccessReview(client, clk.Now)
	ingress := model.VerifiedIdentity{SPIFFE: "spiffe://cluster.local/ns/" + gw + "/sa/ingress", Namespace: gw, ServiceAccount: "ingress"}
	other := model.VerifiedIdentity{SPIFFE: "spiffe://cluster.local/ns/" + gw + "/sa/other", Namespace: gw, ServiceAccount: "other"}
	if err := a.Authorize(ctx, ingress, certs); err != nil {
		t.Fatalf("bound service account refused: %v", err)
	}
	if err := a.Authorize(ctx, other, certs); !errors.Is(err, secret.ErrForbidden) {
		t.Fatalf("unbound service account: %v, want ErrForbidden", err)
	}
	if err := a.Authorize(ctx, ingress, gw); !errors.Is(err, secret.ErrForbidden) {
		t.Fatalf("bound service account in a namespace without a binding: %v, want ErrForbidden", err)
	}

	if err := client.RbacV1().RoleBindings(certs).Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting RoleBinding: %v", err)
	}
	if err := a.Authorize(ctx, ingress, certs); err != nil {
		t.Fatalf("cached decision not used: %v", err)
	}
	clk.Add(secret.AuthzCacheTTL + time.Second)
	if err := a.Authorize(ctx, ingress, certs); !errors.Is(err, secret.ErrForbidden) {
		t.Fatalf("after the cache expired and the binding was deleted: %v, want ErrForbidden", err)
	}
}
