// Package runmaintest checks kubetest.RunMain: one API server shared by every
// test of a package.
package runmaintest

import (
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

// Each test uses the package's one server; names keep them independent.
func TestSharedServerA(t *testing.T) { roundTrip(t, "a") }

func TestSharedServerB(t *testing.T) { roundTrip(t, "b") }

func roundTrip(t *testing.T, name string) {
	t.Parallel()
	cms := env.Clientset().CoreV1().ConfigMaps("default")
	_, err := cms.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       map[string]string{"test": t.Name()},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create configmap %s: %v", name, err)
	}
	cm, err := cms.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil || cm.Data["test"] != t.Name() {
		t.Fatalf("get configmap %s = %v, %v", name, cm, err)
	}
}
