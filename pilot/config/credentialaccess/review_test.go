package credentialaccess_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/credentialaccess"
)

// TestSubjectAccessReview asks a real API server: a ServiceAccount bound to
// a Role listing Secrets in namespace certs is allowed there, another one
// is not, nor is the bound one where it has no binding. Decisions are kept
// for their lifetime after the binding is deleted, then refreshed: the
// refresh, served stale until it answers, flips the decision and pushes.
func TestSubjectAccessReview(t *testing.T) {
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
	certs, gwNS := newNS("certs-"), newNS("gw-")
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
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "ingress", Namespace: gwNS}},
	}
	if _, err := client.RbacV1().RoleBindings(certs).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating RoleBinding: %v", err)
	}

	clk := &clock{now: time.Now()}
	pushed := make(chan string, 100)
	c := credentialaccess.New(credentialaccess.Options{
		Reviewer: credentialaccess.SubjectAccessReview{Client: client}, Now: clk.Now,
		OnDecision: func(ns string) { pushed <- ns },
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { c.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	ingress, other := identity(gwNS, "ingress"), identity(gwNS, "other")
	decide := func(id model.VerifiedIdentity, ns string) model.AccessDecision {
		t.Helper()
		wantState(t, c.Decide(id, ns), model.AccessPending, "first ask of "+id.ServiceAccount+" for "+ns)
		if got := push(t, pushed); got != ns {
			t.Fatalf("decision pushed for %q, want %q", got, ns)
		}
		return c.Decide(id, ns)
	}
	wantState(t, decide(ingress, certs), model.AccessAllowed, "bound service account")
	d := decide(other, certs)
	wantState(t, d, model.AccessDenied, "unbound service account")
	if !strings.Contains(d.Reason, "may not list secrets in namespace") {
		t.Errorf("denial reason %q", d.Reason)
	}
	wantState(t, decide(ingress, gwNS), model.AccessDenied, "bound service account in a namespace without a binding")

	if err := client.RbacV1().RoleBindings(certs).Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting RoleBinding: %v", err)
	}
	wantState(t, c.Decide(ingress, certs), model.AccessAllowed, "cached decision after the binding was deleted")
	// The API server's RBAC authorizer learns of the deletion from its own
	// informer, so under load a refresh may still be allowed (and pushes
	// nothing): expire and refresh again until the decision flips.
	for deadline := time.Now().Add(time.Minute); ; {
		clk.Add(credentialaccess.AuthzCacheTTL + time.Second)
		d := c.Decide(ingress, certs)
		if d.State == model.AccessDenied {
			break // an earlier refresh flipped it; its push is queued
		}
		wantState(t, d, model.AccessAllowed, "expired decision while its refresh runs")
		select {
		case got := <-pushed:
			if got != certs {
				t.Fatalf("flip pushed for %q, want %q", got, certs)
			}
			pushed <- got
		case <-time.After(time.Second):
			if time.Now().After(deadline) {
				t.Fatal("no flip pushed within a minute")
			}
			continue
		}
		break
	}
	if got := push(t, pushed); got != certs {
		t.Fatalf("flip pushed for %q, want %q", got, certs)
	}
	wantState(t, c.Decide(ingress, certs), model.AccessDenied, "after the refresh")
}
