package kubetest

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceAccountToken returns a one-hour token for service account ns/sa from
// the TokenRequest API, creating the namespace and the service account if
// they are missing. With no audiences the token is for the API server itself;
// with others (e.g. "istio-ca") the API server will not accept it.
func (e *Env) ServiceAccountToken(t testing.TB, ns, sa string, audiences ...string) string {
	t.Helper()
	ctx := t.Context()
	cs := e.Clientset()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("kubetest: create namespace %s: %v", ns, err)
	}
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("kubetest: create service account %s/%s: %v", ns, sa, err)
	}
	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: token for service account %s/%s: %v", ns, sa, err)
	}
	return tr.Status.Token
}
