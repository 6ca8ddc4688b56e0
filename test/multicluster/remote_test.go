// Package multicluster_test runs the control plane against two real
// kube-apiservers: the local cluster, and a remote one added through a
// remote secret (issue 18, part 1).
package multicluster_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/serviceregistry/multicluster"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

const (
	localID  = "cluster-local"
	remoteID = "cluster-remote"
	webCDS   = "outbound|8080||web.shop.svc.cluster.local"
	onlyCDS  = "outbound|8080||remote-only.shop.svc.cluster.local"
	waitTime = 30 * time.Second
)

// startEnvs starts n API servers at once (each takes seconds).
func startEnvs(t *testing.T, n int) []*kubetest.Env {
	t.Helper()
	envs := make([]*kubetest.Env, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range envs {
		dir := t.TempDir()
		wg.Go(func() {
			envs[i], errs[i] = kubetest.New(t.Context(), kubetest.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
		})
	}
	wg.Wait()
	for i, e := range envs {
		if e != nil {
			t.Cleanup(func() {
				if t.Failed() {
					e.DumpLogs(t.Output())
				}
				e.Stop()
			})
		}
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	return envs
}

func create[T any](t *testing.T, what string, fn func(context.Context, T, metav1.CreateOptions) (T, error), obj T) {
	t.Helper()
	if _, err := fn(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", what, err)
	}
}

// workload creates service name in shop (port http 8080, created once per
// cluster) and a Deployment-owned pod at ip with its EndpointSlice.
func workload(t *testing.T, cs kubernetes.Interface, service, version, ip string) {
	t.Helper()
	ns := "shop"
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{}); err != nil {
		create(t, "namespace", cs.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	create(t, "service", cs.CoreV1().Services(ns).Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": service}, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	})
	controller := true
	pod := service + "-" + version + "-5d8f7c9b4-x2k9p"
	create(t, "pod", cs.CoreV1().Pods(ns).Create, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns,
			Labels: map[string]string{"app": service, "version": version, "pod-template-hash": "5d8f7c9b4"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
				Name: service + "-" + version + "-5d8f7c9b4", UID: "0b7c3c8e-1111-4a4a-9a9a-000000000001", Controller: &controller}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	})
	create(t, "slice", cs.DiscoveryV1().EndpointSlices(ns).Create, slice(service, ns, pod, ip))
}

func slice(service, ns, pod string, ips ...string) *discoveryv1.EndpointSlice {
	name, port := "http", int32(8080)
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: service + "-1", Namespace: ns, Labels: map[string]string{"kubernetes.io/service-name": service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}
	for _, ip := range ips {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod, Namespace: ns}})
	}
	return sl
}

func remoteSecret(cluster string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "istio-remote-secret-" + cluster, Namespace: "istio-system",
			Labels:      map[string]string{multicluster.SecretLabel: "true"},
			Annotations: map[string]string{multicluster.ClusterAnnotation: cluster},
		},
		Data: map[string][]byte{cluster: kubeconfig},
	}
}

// workloads returns, for EDS cluster name, each endpoint address with its
// istio.workload metadata, failing t on an assignment that is not valid.
func workloads(t *testing.T, c *adsc.Client, name string) map[string]string {
	a := c.Resources(model.EndpointType)[name]
	if a == nil {
		return nil
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := a.UnmarshalTo(cla); err != nil {
		t.Errorf("%s: %v", name, err)
		return nil
	}
	if err := cla.ValidateAll(); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	out := map[string]string{}
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			addr := lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			out[addr] = lb.GetMetadata().GetFilterMetadata()["istio"].GetFields()["workload"].GetStringValue()
		}
	}
	return out
}

// edsLog records the endpoint addresses of webCDS in every EDS response
// of client (once set).
type edsLog struct {
	client atomic.Pointer[adsc.Client]
	mu     sync.Mutex
	states [][]string
}

func (l *edsLog) record() {
	c := l.client.Load()
	if c == nil {
		return
	}
	eps := c.HealthyEndpoints(webCDS)
	l.mu.Lock()
	l.states = append(l.states, eps)
	l.mu.Unlock()
}

func (l *edsLog) since(n int) [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.states[n:])
}

func (l *edsLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.states)
}

// TestRemoteCluster is issue 18's two-cluster acceptance: a remote secret
// for the second API server adds it; Service web, in both clusters, is one
// CDS cluster whose endpoints come from both, each carrying its cluster in
// istio.workload as istiod writes it; rotating the kubeconfig never takes
// an endpoint away; deleting the secret removes the remote endpoints in
// one push.
func TestRemoteCluster(t *testing.T) {
	t.Parallel()
	envs := startEnvs(t, 2)
	local, remote := envs[0], envs[1]
	workload(t, local.Clientset(), "web", "v1", "10.1.0.1")
	workload(t, remote.Clientset(), "web", "v2", "10.2.0.1")
	workload(t, remote.Clientset(), "remote-only", "v1", "10.2.0.9")

	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = local.Config()
	opts.ClusterID = localID
	// No Secret watch for credentials: the remote secret's changes push nothing.
	opts.GatewayCredentials = false
	opts.Log = bootstraptest.Logger(t, slog.LevelInfo, logs)
	srv := bootstraptest.Start(t, opts)

	eds := &edsLog{}
	client := bootstraptest.RunClient(t, srv, adsc.Config{
		Node: bootstraptest.SidecarNode(t, "sleep-1", "shop", "10.1.0.50", nil),
		OnResponse: func(typeURL string, _ []string, _ int) {
			if typeURL == model.EndpointType {
				eds.record()
			}
		},
	})
	eds.client.Store(client)
	bootstraptest.WaitClient(t, client, "the local web endpoint", func(c *adsc.Client) bool {
		return slices.Equal(c.HealthyEndpoints(webCDS), []string{"10.1.0.1:8080"})
	})
	if v := bootstraptest.MetricValue(t, srv, "istiod_managed_clusters", `cluster_type="local"`); v != 1 {
		t.Errorf("istiod_managed_clusters{cluster_type=local} = %v, want 1", v)
	}

	// Add, with the Secret create-remote-secret writes (the reader's token).
	secrets := local.Clientset().CoreV1().Secrets("istio-system")
	create(t, "remote secret", secrets.Create, createRemoteSecret(t, remote, remoteID))
	bootstraptest.WaitClient(t, client, "web's endpoints from both clusters and remote-only's", func(c *adsc.Client) bool {
		return slices.Equal(c.HealthyEndpoints(webCDS), []string{"10.1.0.1:8080", "10.2.0.1:8080"}) &&
			slices.Equal(c.HealthyEndpoints(onlyCDS), []string{"10.2.0.9:8080"})
	})
	if !client.IsEDSCluster(webCDS) {
		t.Errorf("%s is not one EDS cluster", webCDS)
	}
	want := map[string]string{"10.1.0.1": "web-v1;shop;web;v1;" + localID, "10.2.0.1": "web-v2;shop;web;v2;" + remoteID}
	if got := workloads(t, client, webCDS); !equalMaps(got, want) {
		t.Errorf("istio.workload metadata %v, want %v", got, want)
	}
	testutil.Eventually(t, waitTime, "remote cluster metrics", func() bool {
		return bootstraptest.MetricValue(t, srv, "istiod_managed_clusters", `cluster_type="remote"`) == 1 &&
			bootstraptest.MetricValue(t, srv, "istiod_remote_cluster_sync_status",
				`cluster="`+remoteID+`"`, `cluster_type="remote"`, `status="synced"`) == 1
	})

	code, body := testutil.Get(t, "http://"+srv.HTTPListenAddr()+"/debug/clusterz")
	if code != 200 || !strings.Contains(body, `"id": "`+remoteID+`"`) || !strings.Contains(body, "istio-system/istio-remote-secret-"+remoteID) ||
		strings.Contains(body, "eyJ") || strings.Contains(body, "certificate-authority") {
		t.Errorf("/debug/clusterz (%d):\n%s", code, body)
	}

	// Rotate to another kubeconfig (the admin's); then a change in the
	// remote cluster shows the new one serves.
	rotateFrom := eds.len()
	adminConfig, err := os.ReadFile(remote.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Update(t.Context(), remoteSecret(remoteID, adminConfig), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTime, "the rotated kubeconfig taking over", func() bool {
		return strings.Contains(logs.String(), "remote cluster kubeconfig rotated")
	})
	if _, err := remote.Clientset().DiscoveryV1().EndpointSlices("shop").Update(t.Context(),
		slice("web", "shop", "web-v2-5d8f7c9b4-x2k9p", "10.2.0.1", "10.2.0.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bootstraptest.WaitClient(t, client, "the endpoint added after the rotation", func(c *adsc.Client) bool {
		return slices.Contains(c.HealthyEndpoints(webCDS), "10.2.0.2:8080")
	})
	for _, st := range eds.since(rotateFrom) {
		if !slices.Contains(st, "10.2.0.1:8080") {
			t.Errorf("during the rotation an EDS response lacked the remote endpoint: %v", st)
		}
	}

	// Remove: one push takes both remote services' endpoints.
	seq := srv.Discovery().PushSeq()
	if err := secrets.Delete(t.Context(), "istio-remote-secret-"+remoteID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	bootstraptest.WaitClient(t, client, "only the local web endpoint, remote-only gone", func(c *adsc.Client) bool {
		_, only := c.Resources(model.ClusterType)[onlyCDS]
		return !only && slices.Equal(c.HealthyEndpoints(webCDS), []string{"10.1.0.1:8080"})
	})
	if n := srv.Discovery().PushSeq() - seq; n != 1 {
		t.Errorf("the removal took %d push rounds, want 1", n)
	}
	testutil.Eventually(t, waitTime, "istiod_managed_clusters{remote} back to 0", func() bool {
		return bootstraptest.MetricValue(t, srv, "istiod_managed_clusters", `cluster_type="remote"`) == 0
	})
	if strings.Contains(logs.String(), "eyJ") {
		t.Error("a token reached the logs")
	}
}

// TestUnreachableRemoteDoesNotBlockReadiness: a remote secret present at
// start whose cluster never answers delays readiness by
// PILOT_REMOTE_CLUSTER_TIMEOUT, not forever, and is reported as timed out.
func TestUnreachableRemoteDoesNotBlockReadiness(t *testing.T) {
	t.Parallel()
	env := startEnvs(t, 1)[0]
	cs := env.Clientset()
	create(t, "namespace", cs.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}})
	// A kubeconfig for an address nothing listens on.
	dead := "http://" + testutil.FreeAddr(t)
	kubeconfig := []byte("apiVersion: v1\nkind: Config\nclusters: [{name: dead, cluster: {server: '" + dead + "'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: dead, context: {cluster: dead, user: u}}]\ncurrent-context: dead\n")
	create(t, "remote secret", cs.CoreV1().Secrets("istio-system").Create, remoteSecret("dead", kubeconfig))

	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.RemoteClusterTimeout = time.Second
	opts.Log = bootstraptest.Logger(t, slog.LevelInfo, logs)
	srv := bootstraptest.Start(t, opts)
	if !srv.Discovery().Ready() {
		t.Fatal("not ready")
	}
	if !strings.Contains(logs.String(), "ready without it") {
		t.Errorf("no log of the remote cluster left out of readiness:\n%s", logs.String())
	}
	testutil.Eventually(t, waitTime, "sync status timeout", func() bool {
		return bootstraptest.MetricValue(t, srv, "istiod_remote_cluster_sync_status", `cluster="dead"`, `cluster_type="remote"`, `status="timeout"`) == 1
	})
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// createRemoteSecret is pilot-discovery create-remote-secret for env as
// cluster id; the test stands in for the token controller kubetest does
// not run, filling the reader's token Secret.
func createRemoteSecret(t *testing.T, env *kubetest.Env, id string) *corev1.Secret {
	t.Helper()
	type result struct {
		s   *corev1.Secret
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := multicluster.CreateRemoteSecret(t.Context(), multicluster.RemoteSecretOptions{
			Client: env.Clientset(), ClusterID: id, Namespace: "istio-system", Server: env.Config().Host, CreateServiceAccount: true,
		})
		done <- result{s, err}
	}()
	sa := multicluster.ReaderServiceAccount
	secrets := env.Clientset().CoreV1().Secrets("istio-system")
	var token *corev1.Secret
	testutil.EventuallyNoError(t, waitTime, "the reader's token Secret", func() error {
		var err error
		token, err = secrets.Get(t.Context(), sa+"-istio-remote-secret-token", metav1.GetOptions{})
		return err
	})
	token.Data = map[string][]byte{
		corev1.ServiceAccountTokenKey:  []byte(env.ServiceAccountToken(t, "istio-system", sa)),
		corev1.ServiceAccountRootCAKey: env.Config().CAData,
	}
	if _, err := secrets.Update(t.Context(), token, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.s
}
