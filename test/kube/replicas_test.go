package kube_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
)

// TestReplicas sizes: proxies over shared gRPC connections, and each
// connection's max age on the replicas (short, so the test sees load move).
const (
	replicaProxies = 1500
	replicaConns   = 150
	replicaMaxAge  = 3 * time.Second
	// failoverBound is the acceptance bound from SIGKILL to every proxy
	// reconnected with current config.
	failoverBound = 10 * time.Second
)

const echoCluster = "outbound|80||echo.default.svc.cluster.local"

// TestReplicas: three pilot-discovery processes in Kubernetes mode behind a
// random TCP balancer (the Service) serve 1,500 Delta proxies, each replica
// a share. One is SIGKILLed: each of its proxies reconnects to another
// replica, and a ServiceEntry created right after the kill reaches all
// 1,500, within 10 s. A new replica then gets its share as connections age
// out (--keepaliveMaxServerConnectionAge), and every proxy still converges.
func TestReplicas(t *testing.T) {
	began := time.Now()
	// Link pilot-discovery while the API server starts.
	built := buildPilotDiscovery(t)
	env := kubetest.Start(t)
	a := newApplier(t, env)
	installCRDs(t, env, a)
	createEcho(t, env)
	t.Logf("API server and CRDs ready after %v", time.Since(began).Round(time.Millisecond))
	bin := <-built
	if bin == "" {
		t.FailNow() // the build failed and said why
	}
	t.Logf("pilot-discovery built after %v", time.Since(began).Round(time.Millisecond))
	lb := startBalancer(t)

	var rs []*replica
	for i := range 3 {
		rs = append(rs, startReplica(t, bin, env, fmt.Sprintf("istiod-%d", i), replicaMaxAge))
	}
	for _, r := range rs {
		r.waitReady(t)
		lb.add(r.grpcAddr)
	}

	t.Logf("3 replicas ready after %v", time.Since(began).Round(time.Millisecond))
	start := time.Now()
	f := startFleet(t, lb.addr(), replicaProxies, replicaConns)
	took, err := f.waitConverged(nil, start, 2*time.Minute, echoCluster)
	if err != nil {
		t.Fatalf("initial config: %v", err)
	}
	t.Logf("%d proxies over %d connections converged in %v", replicaProxies, replicaConns, took.Round(time.Millisecond))

	// Every replica serves xDS: each holds a share (a fair one is a third;
	// the balancer is random, so ask for a tenth).
	waitUntil(t, "every replica serving a share", func() error {
		got, _, err := shares(rs...)
		if err != nil {
			return err
		}
		for i, n := range got {
			if n < replicaProxies/10 {
				return fmt.Errorf("%s serves %d proxies (shares %v)", rs[i].name, n, got)
			}
		}
		t.Logf("proxies per replica: %v", got)
		return nil
	})

	// Only the singleton writers are elected: with the CA and status
	// writing on (webhooks off), the Leases are the root-cert publisher's
	// and the status writer's, each held by one of the serving replicas.
	holders := leaseHolders(t, env, rs)

	// SIGKILL one replica, the status writer: no GOAWAY, no lease release.
	// Its proxies (those it served a moment before) must come back
	// elsewhere, and a change made while it is gone must reach everyone.
	victim := holders[statusLease]
	var live []*replica
	for _, r := range rs {
		if r != victim {
			live = append(live, r)
		}
	}
	orphans, err := victim.proxies()
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	victim.kill(t)
	a.apply(serviceEntry("failover", "failover.example.com"), "default")
	failoverCluster := "outbound|80||failover.example.com"
	orphansTook, err := f.waitConverged(orphans, killed, failoverBound, echoCluster, failoverCluster)
	if err != nil {
		t.Fatalf("the killed replica's %d proxies: %v", len(orphans), err)
	}
	allTook, err := f.waitConverged(nil, killed, failoverBound, echoCluster, failoverCluster)
	if err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	t.Logf("FIGURE failover: %s's %d proxies reconnected with the new ServiceEntry %v after SIGKILL; all %d proxies %v",
		victim.name, len(orphans), orphansTook.Round(time.Millisecond), replicaProxies, allTook.Round(time.Millisecond))
	_, served, err := shares(live...)
	if err != nil {
		t.Fatal(err)
	}
	back := 0
	for p := range orphans {
		if served[p] {
			back++
		}
	}
	// A proxy between two aged-out streams is on no replica for a moment.
	if back < len(orphans)*9/10 {
		t.Errorf("only %d of %s's %d proxies are on a live replica", back, victim.name, len(orphans))
	}

	// Scale out: a new replica gets its share as connections age out.
	fresh := startReplica(t, bin, env, "istiod-3", replicaMaxAge)
	fresh.waitReady(t)
	lb.add(fresh.grpcAddr)
	joined := time.Now()
	rebalanceBound := replicaMaxAge*11/10 + 10*time.Second + failoverBound // age+jitter, GOAWAY grace, reconnect
	want := replicaProxies / 4                                             // three quarters of a fair third
	var rebalanced time.Duration
	for {
		got, err := fresh.proxies()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= want {
			rebalanced = time.Since(joined)
			break
		}
		if time.Since(joined) > rebalanceBound {
			t.Fatalf("%s serves %d proxies %v after joining, want >= %d", fresh.name, len(got), rebalanceBound, want)
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a wait with a deadline
	}
	got, _, err := shares(append(live, fresh)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE rebalance: %s served %d proxies (a quarter) %v after joining; shares now %v", fresh.name, want, rebalanced.Round(time.Millisecond), got)

	// The dead replica's Leases expire and live replicas take them over.
	taken := leaseHolders(t, env, append(live, fresh))
	t.Logf("FIGURE lease takeover: %s held by %s, %v after the SIGKILL of %s", statusLease, taken[statusLease].name,
		time.Since(killed).Round(time.Second), victim.name)

	// Every proxy, wherever it now is, converges on a later change.
	changed := time.Now()
	a.apply(serviceEntry("after-scale-out", "scaled.example.com"), "default")
	if _, err := f.waitConverged(nil, changed, failoverBound, echoCluster, failoverCluster, "outbound|80||scaled.example.com"); err != nil {
		t.Fatalf("after scale-out: %v", err)
	}
}

// The Leases istiod's singleton writers hold (pilot/bootstrap).
const (
	statusLease     = "istio-status-leader"
	rootCertLease   = "istio-namespace-controller-election"
	electionTimeout = 45 * time.Second // 30 s lease, 2 s retry, and a loaded machine
)

// leaseHolders waits until the Leases in istio-system are exactly the
// status writer's and the root-cert publisher's, each held by one of rs,
// and returns their holders by Lease name.
func leaseHolders(t *testing.T, env *kubetest.Env, rs []*replica) map[string]*replica {
	t.Helper()
	var out map[string]*replica
	testutil.EventuallyNoError(t, electionTimeout, "Leases held by serving replicas", func() error {
		list, err := env.Clientset().CoordinationV1().Leases("istio-system").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		out = map[string]*replica{}
		for _, l := range list.Items {
			if l.Name != statusLease && l.Name != rootCertLease {
				t.Fatalf("Lease %s: only the singleton writers' Leases should exist", l.Name)
			}
			id := ""
			if l.Spec.HolderIdentity != nil {
				id = *l.Spec.HolderIdentity
			}
			for _, r := range rs {
				if r.holds(id) {
					out[l.Name] = r
				}
			}
			if out[l.Name] == nil {
				return fmt.Errorf("Lease %s held by %q, not a serving replica", l.Name, id)
			}
		}
		if len(out) != 2 {
			return fmt.Errorf("Leases %v, want %s and %s", out, statusLease, rootCertLease)
		}
		return nil
	})
	return out
}

// createEcho creates the control plane's namespace and Service
// default/echo with one EndpointSlice of two endpoints (an EDS cluster).
func createEcho(t *testing.T, env *kubetest.Env) {
	t.Helper()
	c := env.Clientset()
	ctx := t.Context()
	mustCreate(t, "namespace", c.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}})
	mustCreate(t, "service", c.CoreV1().Services("default").Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "echo"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](80), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for i := range 2 {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.7.0.%d", i+1)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
		})
	}
	if _, err := c.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// serviceEntry is a mesh-external ServiceEntry of host on port 80 with one
// static endpoint: an EDS cluster outbound|80||HOST.
func serviceEntry(name, host string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: default}
spec:
  hosts: [%s]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: 10.9.9.9}]
`, name, host)
}
