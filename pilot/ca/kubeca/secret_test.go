package kubeca

import (
	"bytes"
	"context"
	"crypto"
	"log/slog"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pilot/ca"
)

func TestLoadOrCreateCreatesThenLoads(t *testing.T) {
	ctx := context.Background()
	cs := env.Clientset()
	ns := createNamespace(t, "ca-create")
	gen := newRoot(t)
	calls := 0
	generate := func() (*ca.Bundle, error) { calls++; return gen, nil }
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	b, created, err := LoadOrCreate(ctx, cs, ns, generate, log)
	if err != nil || !created {
		t.Fatalf("first LoadOrCreate: created=%v err=%v, want created", created, err)
	}
	if !bytes.Equal(b.RootPEM, gen.RootPEM) {
		t.Fatalf("first LoadOrCreate returned a root other than the generated one")
	}
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the Secret: %v", err)
	}
	if s.Type != "istio.io/ca-root" {
		t.Errorf("Secret type %q, want istio.io/ca-root", s.Type)
	}
	for _, k := range []string{"ca-cert.pem", "ca-key.pem", "cert-chain.pem", "key.pem", "root-cert.pem"} {
		if _, ok := s.Data[k]; !ok {
			t.Errorf("Secret lacks key %s", k)
		}
	}
	if !bytes.Equal(s.Data["ca-cert.pem"], gen.CertPEM) || !bytes.Equal(s.Data["ca-key.pem"], gen.KeyPEM) ||
		!bytes.Equal(s.Data["root-cert.pem"], gen.RootPEM) || len(s.Data["cert-chain.pem"]) != 0 {
		t.Errorf("Secret data does not hold the generated bundle")
	}
	parsed, err := ca.ParseBundle(s.Data["ca-cert.pem"], s.Data["ca-key.pem"], s.Data["cert-chain.pem"], s.Data["root-cert.pem"])
	if err != nil {
		t.Fatalf("the stored Secret does not parse: %v", err)
	}
	if !parsed.Cert.Equal(gen.Cert) {
		t.Errorf("stored certificate differs from the generated one")
	}

	// A restart: the Secret is loaded, nothing generated.
	b2, created, err := LoadOrCreate(ctx, cs, ns, generate, log)
	if err != nil || created {
		t.Fatalf("second LoadOrCreate: created=%v err=%v, want loaded", created, err)
	}
	if !bytes.Equal(b2.RootPEM, b.RootPEM) || !bytes.Equal(b2.KeyPEM, b.KeyPEM) {
		t.Errorf("second LoadOrCreate returned a different root or key")
	}
	if !b2.Key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(b.Cert.PublicKey) {
		t.Errorf("loaded key does not match the certificate")
	}
	if calls != 1 {
		t.Errorf("generate called %d times, want 1", calls)
	}
	if strings.Contains(logs.String(), "PRIVATE KEY") || strings.Contains(logs.String(), "BEGIN CERTIFICATE") {
		t.Errorf("logs contain PEM:\n%s", logs.String())
	}
}

// Istio before 1.9 wrote only ca-cert.pem and ca-key.pem; such a Secret
// loads with ca-cert.pem as the root.
func TestLoadOrCreateLoadsOldIstioLayout(t *testing.T) {
	ctx := context.Background()
	cs := env.Clientset()
	ns := createNamespace(t, "ca-old")
	root := newRoot(t)
	_, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns},
		Type:       SecretType,
		Data:       map[string][]byte{"ca-cert.pem": root.CertPEM, "ca-key.pem": root.KeyPEM},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, created, err := LoadOrCreate(ctx, cs, ns, func() (*ca.Bundle, error) {
		t.Error("generate called although the Secret exists")
		return newRoot(t), nil
	}, nil)
	if err != nil || created {
		t.Fatalf("LoadOrCreate: created=%v err=%v", created, err)
	}
	if len(b.Roots) != 1 || !b.Roots[0].Equal(root.Cert) {
		t.Errorf("root is not ca-cert.pem")
	}
}

func TestLoadOrCreateConcurrentReplicasAgree(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "ca-race")
	const replicas = 4
	roots := make([][]byte, replicas)
	createdBy := make([]bool, replicas)
	errs := make([]error, replicas)
	gens := make([]*ca.Bundle, replicas)
	for i := range gens {
		gens[i] = newRoot(t)
	}
	// Every replica generates only after all of them found no Secret, so
	// all but one lose the Create race and must adopt the winner's root.
	var generated sync.WaitGroup
	generated.Add(replicas)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			<-start
			// Each replica has its own client, as separate processes would.
			b, created, err := LoadOrCreate(ctx, env.Clientset(), ns,
				func() (*ca.Bundle, error) {
					generated.Done()
					generated.Wait()
					return gens[i], nil
				}, nil)
			errs[i], createdBy[i] = err, created
			if b != nil {
				roots[i] = b.RootPEM
			}
		})
	}
	close(start)
	wg.Wait()
	creators := 0
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if createdBy[i] {
			creators++
		}
		if !bytes.Equal(roots[i], roots[0]) {
			t.Errorf("replica %d returned a different root than replica 0", i)
		}
	}
	if creators != 1 {
		t.Errorf("%d replicas report creating the Secret, want 1", creators)
	}
	s, err := env.Clientset().CoreV1().Secrets(ns).Get(ctx, SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Data["root-cert.pem"], roots[0]) {
		t.Errorf("the Secret's root is not the one the replicas use")
	}
}

func TestLoadOrCreateCorruptSecretIsAnErrorAndUntouched(t *testing.T) {
	ctx := context.Background()
	cs := env.Clientset()
	root := newRoot(t)
	other := newRoot(t)
	cases := []struct {
		name    string
		data    map[string][]byte
		wantKey string
	}{
		{"garbage-cert", map[string][]byte{"ca-cert.pem": []byte("not a certificate"), "ca-key.pem": root.KeyPEM}, "ca-cert.pem"},
		{"missing-key", map[string][]byte{"ca-cert.pem": root.CertPEM}, "ca-key.pem"},
		{"mismatched-key", map[string][]byte{"ca-cert.pem": root.CertPEM, "ca-key.pem": other.KeyPEM}, "ca-key.pem"},
		{"garbage-root", map[string][]byte{"ca-cert.pem": root.CertPEM, "ca-key.pem": root.KeyPEM, "root-cert.pem": []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")}, "root-cert.pem"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := createNamespace(t, "ca-corrupt-"+tc.name)
			orig, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns},
				Type:       SecretType,
				Data:       tc.data,
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = LoadOrCreate(ctx, cs, ns, func() (*ca.Bundle, error) { return newRoot(t), nil }, nil)
			if err == nil {
				t.Fatal("LoadOrCreate accepted a corrupt Secret")
			}
			t.Logf("error: %v", err)
			for _, want := range []string{ns + "/" + SecretName, tc.wantKey} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			got, err := cs.CoreV1().Secrets(ns).Get(ctx, SecretName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.ResourceVersion != orig.ResourceVersion {
				t.Errorf("Secret modified: resourceVersion %s → %s", orig.ResourceVersion, got.ResourceVersion)
			}
		})
	}
}
