package multicluster

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
)

const (
	testNS   = "istio-system"
	webHost  = "web.shop.svc.cluster.local"
	waitTime = 30 * time.Second
)

// changeLog records what the controller reported.
type changeLog struct {
	mu  sync.Mutex
	all []model.RegistryChanges
}

func (l *changeLog) add(ch model.RegistryChanges) {
	l.mu.Lock()
	l.all = append(l.all, ch)
	l.mu.Unlock()
}

func (l *changeLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}

func (l *changeLog) since(n int) []model.RegistryChanges {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]model.RegistryChanges(nil), l.all[n:]...)
}

func create[T any](t *testing.T, what string, fn func(context.Context, T, metav1.CreateOptions) (T, error), obj T) {
	t.Helper()
	if _, err := fn(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", what, err)
	}
}

// webService creates namespace shop with Service web (port http 8080)
// and an EndpointSlice with ips.
func webService(t *testing.T, cs kubernetes.Interface, ips ...string) {
	t.Helper()
	create(t, "namespace", cs.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	create(t, "service", cs.CoreV1().Services("shop").Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	})
	create(t, "slice", cs.DiscoveryV1().EndpointSlices("shop").Create, webSlice(ips...))
}

func webSlice(ips ...string) *discoveryv1.EndpointSlice {
	name, port := "http", int32(8080)
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Labels: map[string]string{"kubernetes.io/service-name": "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}
	for _, ip := range ips {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	return sl
}

func remoteSecret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: map[string]string{SecretLabel: "true"}},
		Data:       data,
	}
}

// readerKubeconfig returns the kubeconfig CreateRemoteSecret writes for
// env as cluster id: the reader's token, with the reader's ClusterRole.
func readerKubeconfig(t *testing.T, env *kubetest.Env, id string) []byte {
	t.Helper()
	s := readerSecret(t, env, id)
	return []byte(s.StringData[id])
}

// readerSecret runs CreateRemoteSecret against env, standing in for the
// token controller kubetest does not run.
func readerSecret(t *testing.T, env *kubetest.Env, id string) *corev1.Secret {
	t.Helper()
	type result struct {
		s   *corev1.Secret
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := CreateRemoteSecret(t.Context(), RemoteSecretOptions{
			Client: env.Clientset(), ClusterID: id, Namespace: testNS, Server: env.Config().Host, CreateServiceAccount: true,
		})
		done <- result{s, err}
	}()
	fillToken(t, env, testNS, ReaderServiceAccount)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.s
}

// fillToken does what kube-controller-manager's token controller would
// (kubetest runs none): it fills the reader's token Secret, once created,
// with a token of the service account and the cluster's CA.
func fillToken(t *testing.T, env *kubetest.Env, ns, sa string) {
	t.Helper()
	secrets := env.Clientset().CoreV1().Secrets(ns)
	var s *corev1.Secret
	testutil.EventuallyNoError(t, waitTime, "the reader's token Secret", func() error {
		var err error
		s, err = secrets.Get(t.Context(), tokenSecretName(sa), metav1.GetOptions{})
		return err
	})
	s.Data = map[string][]byte{
		corev1.ServiceAccountTokenKey:  []byte(env.ServiceAccountToken(t, ns, sa)),
		corev1.ServiceAccountRootCAKey: env.Config().CAData,
	}
	if _, err := secrets.Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func adminKubeconfig(t *testing.T, env *kubetest.Env) []byte {
	t.Helper()
	raw, err := os.ReadFile(env.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestAddRotateRemove runs the controller against one real API server that
// is both the control plane's cluster and, through the remote secret, the
// remote cluster "remote-a": its services come with that ClusterID, a
// rotated kubeconfig takes over without the service or its endpoints ever
// leaving and without reporting a change, and deleting the secret takes
// them out in one change.
func TestAddRotateRemove(t *testing.T) {
	env := kubetest.Start(t)
	cs := env.Clientset()
	create(t, "namespace", cs.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}})
	webService(t, cs, "10.2.0.1")

	logs := &testutil.Buffer{}
	endpoints := model.NewEndpointIndex()
	changes := &changeLog{}
	c, err := NewController(Options{
		Client: cs, Namespace: testNS, LocalClusterID: "local", Domain: "cluster.local",
		Endpoints: endpoints, OnChange: changes.add, Metrics: NewMetrics(prometheus.NewRegistry()),
		Log: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("controller logs:\n%s", logs.String())
		}
	})
	if err := c.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := c.Services(); len(got) != 0 {
		t.Fatalf("%d services before any remote secret", len(got))
	}

	// Add: the key naming the local cluster is ignored.
	admin := adminKubeconfig(t, env)
	secrets := cs.CoreV1().Secrets(testNS)
	create(t, "secret", secrets.Create, remoteSecret("remote-a", map[string][]byte{"remote-a": admin, "local": admin}))
	testutil.Eventually(t, waitTime, "remote-a's web endpoint", func() bool {
		eps := endpoints.Endpoints(webHost)
		return c.Service(webHost) != nil && len(eps) == 1 && eps[0].ClusterID == "remote-a"
	})
	if got := endpoints.Endpoints(webHost)[0]; got.Address != "10.2.0.1" {
		t.Errorf("endpoint %s, want 10.2.0.1", got.Address)
	}
	testutil.Eventually(t, waitTime, "remote-a synced", func() bool {
		cl := c.Clusters()
		return len(cl) == 1 && cl[0].ID == "remote-a" && cl[0].Status == StatusSynced
	})
	if !strings.Contains(logs.String(), "remote secret names the local cluster; ignored") {
		t.Error("no log of the ignored local cluster key")
	}

	// Rotate: sample the model while the new kubeconfig takes over.
	before := changes.len()
	var misses atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			default:
			}
			if c.Service(webHost) == nil || len(endpoints.Endpoints(webHost)) != 1 {
				misses.Add(1)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	reader := readerKubeconfig(t, env, "remote-a")
	if _, err := secrets.Update(t.Context(), remoteSecret("remote-a", map[string][]byte{"remote-a": reader}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTime, "the rotated kubeconfig taking over", func() bool {
		return strings.Contains(logs.String(), "remote cluster kubeconfig rotated")
	})
	close(stopSampling)
	<-sampled
	if n := misses.Load(); n > 0 {
		t.Errorf("the service or its endpoint was missing %d times during the rotation", n)
	}
	if got := changes.since(before); len(got) != 0 {
		t.Errorf("the rotation reported %d changes (%+v), want none: nothing changed in the cluster", len(got), got)
	}
	// The new controller serves: a new endpoint arrives (and its change
	// is reported: the endpoints are written before OnChange is called).
	reported := changes.len()
	if _, err := cs.DiscoveryV1().EndpointSlices("shop").Update(t.Context(), webSlice("10.2.0.1", "10.2.0.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTime, "the second endpoint", func() bool {
		return len(endpoints.Endpoints(webHost)) == 2 && changes.len() > reported
	})

	// Remove: one change takes the service and its endpoints out.
	before = changes.len()
	if err := secrets.Delete(t.Context(), "remote-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTime, "remote-a removed and reported", func() bool {
		return c.Service(webHost) == nil && changes.len() > before
	})
	if eps := endpoints.Endpoints(webHost); len(eps) != 0 {
		t.Errorf("%d endpoints left after the cluster was removed", len(eps))
	}
	got := changes.since(before)
	if len(got) != 1 || len(got[0].Services) == 0 {
		t.Fatalf("removal reported %+v, want one change naming the services", got)
	}
	if len(c.Clusters()) != 0 {
		t.Errorf("clusters %+v after removal", c.Clusters())
	}
	if strings.Contains(logs.String(), "certificate-authority-data") || strings.Contains(logs.String(), "eyJ") {
		t.Error("the logs quote a kubeconfig")
	}
}

// TestBadKubeconfigLeavesOthers: a key whose kubeconfig is refused is
// logged with its secret and key; the other keys' clusters come.
func TestBadKubeconfigLeavesOthers(t *testing.T) {
	env := kubetest.Start(t)
	cs := env.Clientset()
	create(t, "namespace", cs.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}})
	webService(t, cs, "10.2.0.1")
	// Present before the controller starts: WaitReady waits for it.
	create(t, "secret", cs.CoreV1().Secrets(testNS).Create, remoteSecret("mixed", map[string][]byte{
		"good": adminKubeconfig(t, env), "bad": []byte("apiVersion: v1\nusers: [{name: u, user: {exec: {command: /bin/s3cr3t}}}]\n"),
	}))
	logs := &testutil.Buffer{}
	endpoints := model.NewEndpointIndex()
	c, err := NewController(Options{
		Client: cs, Namespace: testNS, LocalClusterID: "local", Domain: "cluster.local",
		Endpoints: endpoints, Log: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := c.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Ready means the good cluster synced.
	if eps := endpoints.Endpoints(webHost); len(eps) != 1 || eps[0].ClusterID != "good" {
		t.Fatalf("endpoints %v after WaitReady, want good's", eps)
	}
	out := logs.String()
	for _, want := range []string{`"msg":"remote cluster kubeconfig rejected"`, `"secret":"istio-system/mixed"`, `"key":"bad"`, "exec credential plugins"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cr3t") {
		t.Error("the logs quote the kubeconfig")
	}
}

// TestCreateRemoteSecret: the Secret is istioctl's (name, label,
// annotation, one key), its kubeconfig is inline and reads the cluster
// with the reader's rights, and no more.
func TestCreateRemoteSecret(t *testing.T) {
	env := kubetest.Start(t)
	s := readerSecret(t, env, "cluster-2")
	if s.Name != "istio-remote-secret-cluster-2" || s.Namespace != testNS || s.Labels[SecretLabel] != "true" ||
		s.Annotations[ClusterAnnotation] != "cluster-2" || len(s.StringData) != 1 {
		t.Fatalf("secret %s/%s labels %v annotations %v keys %d", s.Namespace, s.Name, s.Labels, s.Annotations, len(s.StringData))
	}
	rc, err := restConfigFor([]byte(s.StringData["cluster-2"]))
	if err != nil {
		t.Fatalf("the kubeconfig is refused: %v", err)
	}
	if rc.Host != env.Config().Host {
		t.Errorf("server %s, want %s", rc.Host, env.Config().Host)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("").List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Errorf("the reader cannot list EndpointSlices: %v", err)
	}
	if _, err := cs.CoreV1().Secrets(testNS).List(t.Context(), metav1.ListOptions{}); err == nil {
		t.Error("the reader can list Secrets")
	}
	// Run again (istioctl is re-run to rotate): the reader exists, same shape.
	if again := readerSecret(t, env, "cluster-2"); again.StringData["cluster-2"] == "" {
		t.Error("second run wrote no kubeconfig")
	}
}
