package secret_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/networking/secret"
)

// env is one API server shared by the package's tests.
var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

// TestKubeSecrets serves a gateway's credential from a real API server and
// follows its rotation.
func TestKubeSecrets(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	client := env.Clientset()
	ns, err := client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	sec := tlsSecret(ns.Name, "ingress-cert", map[string]string{"tls.crt": "CERT1", "tls.key": "KEY1", "ca.crt": "CA1"})
	if _, err := client.CoreV1().Secrets(ns.Name).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating secret: %v", err)
	}

	ks := secret.NewKubeSecrets(client, nil)
	var mu sync.Mutex
	changed := map[string]int{}
	if err := ks.OnChange(func(namespace, name string) {
		mu.Lock()
		defer mu.Unlock()
		changed[namespace+"/"+name]++
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { ks.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	testutil.Eventually(t, time.Minute, "secret informer sync", ks.HasSynced)

	g := secret.Generator{Secrets: ks}
	proxy := gatewayProxy(ns.Name)
	got := generate(t, g, proxy, "kubernetes://ingress-cert", "kubernetes://ingress-cert-cacert")
	if c := got["kubernetes://ingress-cert"].GetTlsCertificate().GetCertificateChain().GetInlineBytes(); string(c) != "CERT1" {
		t.Fatalf("certificate %q, want CERT1", c)
	}
	if ca := got["kubernetes://ingress-cert-cacert"].GetValidationContext().GetTrustedCa().GetInlineBytes(); string(ca) != "CA1" {
		t.Fatalf("CA %q, want CA1", ca)
	}
	// Another namespace's gateway gets nothing.
	if got := generate(t, g, gatewayProxy("default"), "kubernetes://ingress-cert", "kubernetes://"+ns.Name+"/ingress-cert"); len(got) != 0 {
		t.Errorf("gateway of namespace default got %v", got)
	}

	sec.Data["tls.crt"] = []byte("CERT2")
	if _, err := client.CoreV1().Secrets(ns.Name).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating secret: %v", err)
	}
	testutil.Eventually(t, time.Minute, "rotated certificate", func() bool {
		got := generate(t, g, proxy, "kubernetes://ingress-cert")
		return string(got["kubernetes://ingress-cert"].GetTlsCertificate().GetCertificateChain().GetInlineBytes()) == "CERT2"
	})
	testutil.Eventually(t, time.Minute, "change notifications", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return changed[ns.Name+"/ingress-cert"] >= 2
	})
}
