package kube_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/nds"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

const (
	rollNS      = "roll"
	apiCluster  = "outbound|8080||api.roll.svc.cluster.local"
	dbHeadless  = "db.roll.svc.cluster.local"
	rolloutPods = 3
)

// rollSlice is the EndpointSlice of service svc (port name/number) holding
// pods, each by name with its IP and readiness; terminating pods are
// written as the EndpointSlice controller writes them: not ready, still
// serving, terminating.
type rollPod struct {
	name, ip           string
	ready, terminating bool
}

func rollSlice(svc, port string, number int32, pods []rollPod) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-x1", Namespace: rollNS, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr(port), Port: ptr(number), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{p.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(p.ready && !p.terminating),
				Serving: ptr(p.ready), Terminating: ptr(p.terminating)},
			NodeName:  ptr("node-a"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: rollNS, Name: p.name},
		})
	}
	return s
}

func writeSlice(t *testing.T, c kubernetes.Interface, s *discoveryv1.EndpointSlice) {
	t.Helper()
	ctx := context.Background()
	cur, err := c.DiscoveryV1().EndpointSlices(rollNS).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		mustCreate(t, "EndpointSlice "+s.Name, c.DiscoveryV1().EndpointSlices(rollNS).Create, s)
		return
	}
	s.ResourceVersion = cur.ResourceVersion
	if _, err := c.DiscoveryV1().EndpointSlices(rollNS).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update EndpointSlice %s: %v", s.Name, err)
	}
}

// rollingService is one Deployment-like set of pods behind a Service, its
// EndpointSlice written by the test as the EndpointSlice controller would.
type rollingService struct {
	name, port string
	number     int32
	pods       []rollPod
}

func (r *rollingService) write(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	writeSlice(t, c, rollSlice(r.name, r.port, r.number, r.pods))
}

// ips returns the IPs of the ready, not terminating pods, sorted.
func (r *rollingService) ips() []string {
	var out []string
	for _, p := range r.pods {
		if p.ready && !p.terminating {
			out = append(out, p.ip)
		}
	}
	slices.Sort(out)
	return out
}

// TestRollingRestartIsEndpointOnly restarts, pod by pod as a Deployment
// does, a ClusterIP service and a headless one on a real API server under
// connected proxies: each new pod reaches EDS (ClusterIP) and the DNS name
// table (headless), each terminating pod leaves them as soon as it is
// marked terminating (istio/istio#44985) — even before its EndpointSlice
// says so — and no change rebuilds the PushContext or pushes CDS
// (istio/istio#33969: a headless service's endpoints caused full pushes).
func TestRollingRestartIsEndpointOnly(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Clientset()
	srv, _ := startKubeServer(t, env, nil)

	mustCreate(t, "namespace", c.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rollNS}})
	mustCreate(t, "node", c.CoreV1().Nodes().Create, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	mustCreate(t, "service api", c.CoreV1().Services(rollNS).Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: rollNS},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "api"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	})
	mustCreate(t, "service db", c.CoreV1().Services(rollNS).Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: rollNS},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{{Name: "tcp", Port: 5432}}},
	})
	api := &rollingService{name: "api", port: "http", number: 8080}
	db := &rollingService{name: "db", port: "tcp", number: 5432}
	for i, svc := range []*rollingService{api, db} {
		for j := range rolloutPods {
			p := rollPod{name: fmt.Sprintf("%s-old-%d", svc.name, j), ip: fmt.Sprintf("10.%d.0.%d", 20+i, j+1), ready: true}
			runningPod(t, c, rollNS, p.name, p.ip, "node-a", map[string]string{"app": svc.name})
			svc.pods = append(svc.pods, p)
		}
		svc.write(t, c)
	}

	client := bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "client-1", rollNS, "10.29.9.9", map[string]string{"app": "client"})})
	names := watchNameTable(t, srv, bootstraptest.SidecarNode(t, "client-2", rollNS, "10.29.9.8", map[string]string{"app": "client"}))
	converged := func(what string) {
		t.Helper()
		want := []string{}
		for _, ip := range api.ips() {
			want = append(want, ip+":8080")
		}
		bootstraptest.WaitClient(t, client, what+": api's endpoints "+fmt.Sprint(want), func(c *adsc.Client) bool {
			return slices.Equal(c.HealthyEndpoints(apiCluster), want)
		})
		names.wait(t, what+": db resolves to "+fmt.Sprint(db.ips()), func(tb nds.NameTable) bool {
			got := slices.Clone(tb[dbHeadless].IPs)
			slices.Sort(got)
			return slices.Equal(got, db.ips())
		})
	}
	converged("start")
	// Endpoints carry their pod's service account, and the set of them
	// shapes the clusters (SANs): a slice seen before its pods (the
	// informers are independent; under load the pods' can lag) gives
	// endpoints none, and the pods' arrival is then a cluster change, a
	// full push. So before counting builds, wait for every endpoint to
	// carry its account, then push a marker Service through: once the
	// client holds its cluster, whatever full push was pending is done.
	waitUntil(t, "endpoints carrying their pods' service account", func() error {
		for _, h := range []string{"api." + rollNS + ".svc.cluster.local", dbHeadless} {
			eps := srv.Discovery().PushContext().Endpoints.Endpoints(h)
			if len(eps) == 0 {
				return fmt.Errorf("%s has no endpoints", h)
			}
			for _, e := range eps {
				if e.ServiceAccount != "web" { // runningPod's account
					return fmt.Errorf("%s endpoint %s has service account %q", h, e.Address, e.ServiceAccount)
				}
			}
		}
		return nil
	})
	mustCreate(t, "service marker", c.CoreV1().Services(rollNS).Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "marker", Namespace: rollNS},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tcp", Port: 9999}}},
	})
	bootstraptest.WaitClient(t, client, "the marker Service's cluster", func(c *adsc.Client) bool {
		_, ok := c.Resources(model.ClusterType)["outbound|9999||marker."+rollNS+".svc.cluster.local"]
		return ok
	})

	pc := srv.Discovery().PushContext()
	builds := bootstraptest.MetricValue(t, srv, "pilot_pushcontext_init_seconds_count")
	cds := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="cds"`)
	eds := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="eds"`)

	ctx := context.Background()
	for j := range rolloutPods {
		for i, svc := range []*rollingService{api, db} {
			step := fmt.Sprintf("%s pod %d", svc.name, j)
			// The new pod starts, then turns ready.
			p := rollPod{name: fmt.Sprintf("%s-new-%d", svc.name, j), ip: fmt.Sprintf("10.%d.1.%d", 20+i, j+1)}
			runningPod(t, c, rollNS, p.name, p.ip, "node-a", map[string]string{"app": svc.name})
			svc.pods = append(svc.pods, p)
			svc.write(t, c)
			converged(step + " created, not ready")
			svc.pods[len(svc.pods)-1].ready = true
			svc.write(t, c)
			converged(step + " ready")

			// The old pod is deleted gracefully: it turns terminating (there
			// is no kubelet to finish the deletion) before its slice says so.
			old := &svc.pods[j]
			if err := c.CoreV1().Pods(rollNS).Delete(ctx, old.name, metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](30)}); err != nil {
				t.Fatal(err)
			}
			old.terminating = true
			converged(step + ": the old pod terminating, its slice not yet updated")
			svc.write(t, c)
			converged(step + ": the old pod terminating in its slice")
		}
	}
	// The old pods go for good.
	for _, svc := range []*rollingService{api, db} {
		for j := range rolloutPods {
			if err := c.CoreV1().Pods(rollNS).Delete(ctx, svc.pods[j].name, metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
		svc.pods = svc.pods[rolloutPods:]
		svc.write(t, c)
	}
	converged("old pods deleted")

	if srv.Discovery().PushContext() != pc {
		t.Error("the rolling restart rebuilt the PushContext")
	}
	if got := bootstraptest.MetricValue(t, srv, "pilot_pushcontext_init_seconds_count"); got != builds {
		t.Errorf("pilot_pushcontext_init_seconds_count went from %v to %v during the rolling restart", builds, got)
	}
	if got := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="cds"`); got != cds {
		t.Errorf("pilot_xds_pushes{type=cds} went from %v to %v during the rolling restart", cds, got)
	}
	if got := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="eds"`); got <= eds {
		t.Errorf("pilot_xds_pushes{type=eds} stayed at %v", got)
	}
}

// nameTableWatch is one proxy's NDS stream: the last name table received.
type nameTableWatch struct {
	mu      sync.Mutex
	table   nds.NameTable
	err     error
	changed chan struct{} // closed and replaced on every response
}

// watchNameTable opens an ADS stream for node that subscribes to the name
// table and ACKs every response, until the test ends.
func watchNameTable(t *testing.T, srv *bootstrap.Server, node *corev3.Node) *nameTableWatch {
	t.Helper()
	d, err := nds.NewDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(bootstraptest.Dial(t, srv.GRPCListenAddr())).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &nameTableWatch{changed: make(chan struct{})}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		w.run(stream, d, node)
	}()
	return w
}

func (w *nameTableWatch) run(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, d nds.Descriptors, node *corev3.Node) {
	err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: model.NameTableType})
	for err == nil {
		var resp *discovery.DiscoveryResponse
		if resp, err = stream.Recv(); err != nil {
			break
		}
		if len(resp.GetResources()) != 1 {
			err = fmt.Errorf("name table response with %d resources, want 1", len(resp.GetResources()))
			break
		}
		var table nds.NameTable
		if table, err = d.UnmarshalAny(resp.GetResources()[0]); err != nil {
			break
		}
		w.mu.Lock()
		w.table = table
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
		err = stream.Send(&discovery.DiscoveryRequest{TypeUrl: model.NameTableType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
	}
	w.mu.Lock()
	w.err = err
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// wait waits up to 30 s until cond holds for the last table received.
func (w *nameTableWatch) wait(t *testing.T, what string, cond func(nds.NameTable) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		w.mu.Lock()
		table, err, changed := w.table, w.err, w.changed
		w.mu.Unlock()
		if table != nil && cond(table) {
			return
		}
		if err != nil {
			t.Fatalf("waiting for %s: NDS stream ended: %v", what, err)
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("waiting for %s: last name table %v", what, table)
		}
	}
}
