package secrets_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/config/secrets"
)

// env is one API server shared by the package's tests.
var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

// notes records the onChange calls of a Kube, in order, each with the
// certificate the source held for that Secret when it was called.
type notes struct {
	mu   sync.Mutex
	seen []string
}

func (n *notes) add(key, cert string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seen = append(n.seen, key+"="+cert)
}

func (n *notes) list() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.seen)
}

// TestKube fills a Source from a real API server and follows a credential's
// rotation and deletion: the snapshot holds the change before onChange is
// called; a change of labels alone notifies nobody; service-account tokens
// are not watched.
func TestKube(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	client := env.Clientset()
	ns, err := client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	api := client.CoreV1().Secrets(ns.Name)
	sec := tlsSecret(ns.Name, "ingress-cert", map[string]string{"tls.crt": "CERT1", "tls.key": "KEY1", "ca.crt": "CA1"})
	if _, err := api.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating secret: %v", err)
	}
	token := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
		Type:       corev1.SecretTypeServiceAccountToken,
	}
	if _, err := api.Create(ctx, token, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating token secret: %v", err)
	}

	src := secrets.NewSource()
	var changed notes
	onChange := func(namespace, name string) {
		if namespace != ns.Name { // the API server is shared by the package's tests and reruns
			return
		}
		changed.add(namespace+"/"+name, certOf(src.Snapshot().Secret(namespace, name)))
	}
	ks, err := secrets.NewKube(client, src, onChange, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { ks.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	testutil.Eventually(t, time.Minute, "secret informer sync", ks.HasSynced)

	snap := src.Snapshot()
	if got := certOf(snap.Secret(ns.Name, "ingress-cert")); got != "CERT1" {
		t.Fatalf("after sync the snapshot has %q, want CERT1", got)
	}
	if snap.Secret(ns.Name, "token") != nil {
		t.Error("a service-account token Secret is in the snapshot")
	}

	sec.Labels = map[string]string{"team": "edge"}
	if _, err := api.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("relabelling secret: %v", err)
	}
	sec.Labels = nil
	sec.Data["tls.crt"] = []byte("CERT2")
	if _, err := api.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating secret: %v", err)
	}
	key := ns.Name + "/ingress-cert"
	testutil.Eventually(t, time.Minute, "rotation notified", func() bool { return len(changed.list()) >= 2 })
	// The relabelling notified nobody; each notification found its change in the source.
	if got, want := changed.list(), []string{key + "=CERT1", key + "=CERT2"}; !slices.Equal(got, want) {
		t.Fatalf("notifications %v, want %v", got, want)
	}
	if got := certOf(snap.Secret(ns.Name, "ingress-cert")); got != "CERT1" {
		t.Errorf("the snapshot taken before the rotation now reads %q", got)
	}

	if err := api.Delete(ctx, sec.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting secret: %v", err)
	}
	testutil.Eventually(t, time.Minute, "deletion notified", func() bool { return len(changed.list()) >= 3 })
	if got := changed.list()[2]; got != key+"=" {
		t.Errorf("deletion notified as %q, want %q (gone from the source)", got, key+"=")
	}
}
