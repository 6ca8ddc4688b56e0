package kubeca

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pilot/ca"
)

// env is one API server shared by the package's tests; each test works in
// namespaces of its own.
var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

func newRoot(t *testing.T) *ca.Bundle {
	t.Helper()
	b, err := ca.NewSelfSigned(ca.SelfSignedOptions{})
	if err != nil {
		t.Fatalf("NewSelfSigned: %v", err)
	}
	return b
}

// createNamespace creates a namespace named prefix-RANDOM and returns its
// name: namespaces are never finalized here, and the API server outlives
// one run of a test (-count).
func createNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns, err := env.Clientset().CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s-*: %v", prefix, err)
	}
	return ns.Name
}
