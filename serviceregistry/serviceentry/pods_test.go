package serviceentry

import (
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/serviceregistry/kube"
)

// legacyEntry is a ServiceEntry in shop selecting app=legacy, with a port
// whose targetPort differs from its number and one that has none.
func legacyEntry() model.Config {
	return seConfig("legacy", "shop", &networking.ServiceEntry{
		Hosts:      []string{"legacy.shop.internal"},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{
			{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080},
			{Number: 9000, Name: "grpc", Protocol: "GRPC"},
		},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "legacy"}},
	})
}

// servingPod is a running, ready pod with an IP.
func servingPod(ns, name, ip string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "legacy-sa"},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

var nodeA = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{
	kube.LabelTopologyRegion: "eu-west1", kube.LabelTopologyZone: "eu-west1-b", kube.LabelTopologySubzone: "rack-7",
}}}

func TestPodEndpointsConversion(t *testing.T) {
	labels := map[string]string{"app": "legacy", "version": "v1", "security.istio.io/tlsMode": "istio"}
	pod := servingPod("shop", "legacy-1", "10.1.0.1", labels)
	// A named container port overrides the ServiceEntry's number for grpc.
	pod.Spec.Containers = []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{
		{Name: "grpc", ContainerPort: 9443},
		{Name: "metrics", ContainerPort: 15014},
	}}}
	noSA := servingPod("shop", "legacy-2", "10.1.0.2", map[string]string{"app": "legacy", "istio-locality": "us-east1.us-east1-a"})
	noSA.Spec.ServiceAccountName = ""
	idx := kube.NewIndex(kube.Objects{Pods: []*corev1.Pod{pod, noSA}, Nodes: []*corev1.Node{nodeA}})
	cfg := legacyEntry()

	got := PodEndpoints(&cfg, idx)
	ep := func(ip string, port uint32, name string, lbls map[string]string, sa, locality, pod string) *model.Endpoint {
		return &model.Endpoint{Address: ip, Port: port, ServicePortName: name, Labels: lbls, ServiceAccount: sa,
			Locality: locality, Healthy: true, Namespace: "shop", WorkloadName: pod}
	}
	want := []*model.Endpoint{
		ep("10.1.0.1", 8080, "http", labels, "legacy-sa", "eu-west1/eu-west1-b/rack-7", "legacy-1"),
		ep("10.1.0.1", 9443, "grpc", labels, "legacy-sa", "eu-west1/eu-west1-b/rack-7", "legacy-1"),
		ep("10.1.0.2", 8080, "http", noSA.Labels, "default", "us-east1/us-east1-a", "legacy-2"),
		ep("10.1.0.2", 9000, "grpc", noSA.Labels, "default", "us-east1/us-east1-a", "legacy-2"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	// Labels are copies: the endpoint must not alias the pod's map.
	got[0].Labels["app"] = "changed"
	if pod.Labels["app"] != "legacy" {
		t.Error("endpoint labels alias the pod's labels")
	}
}

func TestPodEndpointsExcludeUnservingAndOtherNamespaces(t *testing.T) {
	sel := map[string]string{"app": "legacy"}
	notReady := servingPod("shop", "not-ready", "10.1.0.2", sel)
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	pending := servingPod("shop", "pending", "10.1.0.3", sel)
	pending.Status.Phase = corev1.PodPending
	noIP := servingPod("shop", "no-ip", "", sel)
	deleting := servingPod("shop", "deleting", "10.1.0.4", sel)
	deleting.DeletionTimestamp = &metav1.Time{}
	succeeded := servingPod("shop", "done", "10.1.0.5", sel)
	succeeded.Status.Phase = corev1.PodSucceeded
	otherNS := servingPod("other", "elsewhere", "10.2.0.1", sel)
	otherLabels := servingPod("shop", "unrelated", "10.1.0.6", map[string]string{"app": "web"})
	partial := servingPod("shop", "partial", "10.1.0.7", map[string]string{"version": "v1"})
	good := servingPod("shop", "good", "10.1.0.1", map[string]string{"app": "legacy", "extra": "x"})
	idx := kube.NewIndex(kube.Objects{Pods: []*corev1.Pod{notReady, pending, noIP, deleting, succeeded, otherNS, otherLabels, partial, good}})

	cfg := legacyEntry()
	var ips []string
	for _, e := range PodEndpoints(&cfg, idx) {
		ips = append(ips, e.Address)
	}
	if want := []string{"10.1.0.1", "10.1.0.1"}; !slices.Equal(ips, want) {
		t.Errorf("selected addresses %v, want %v (only the serving pod of shop with app=legacy)", ips, want)
	}

	// A source that ignores the namespace does not widen the selection.
	if got := PodEndpoints(&cfg, everyPod{otherNS}); len(got) != 0 {
		t.Errorf("pod of namespace other selected by a ServiceEntry of shop: %v", got)
	}
	// No workloadSelector, or no source: nothing.
	plain := seConfig("plain", "shop", &networking.ServiceEntry{Hosts: []string{"plain.example.com"},
		Ports: []*networking.ServicePort{{Number: 80, Name: "http"}}})
	if got := PodEndpoints(&plain, idx); got != nil {
		t.Errorf("ServiceEntry without workloadSelector got pod endpoints %v", got)
	}
	if got := PodEndpoints(&cfg, nil); got != nil {
		t.Errorf("nil pod source gave %v", got)
	}
}

// everyPod is a PodSource that returns its pods whatever is asked.
type everyPod []*corev1.Pod

func (e everyPod) SelectPods(string, map[string]string) []*corev1.Pod { return e }
func (e everyPod) PodLocality(*corev1.Pod) string                     { return "" }

func TestPodSourcesFirstWins(t *testing.T) {
	sel := map[string]string{"app": "legacy"}
	cluster := kube.NewIndex(kube.Objects{Pods: []*corev1.Pod{servingPod("shop", "a", "10.0.0.1", sel)}})
	files := kube.NewIndex(kube.Objects{
		Pods:  []*corev1.Pod{servingPod("shop", "a", "10.9.9.9", sel), servingPod("shop", "b", "10.0.0.2", sel)},
		Nodes: []*corev1.Node{nodeA},
	})
	ps := PodSources{cluster, files}
	var ips []string
	for _, p := range ps.SelectPods("shop", sel) {
		ips = append(ips, p.Status.PodIP)
	}
	if want := []string{"10.0.0.1", "10.0.0.2"}; !slices.Equal(ips, want) {
		t.Errorf("pods %v, want %v", ips, want)
	}
	if got := ps.PodLocality(servingPod("shop", "a", "", sel)); got != "eu-west1/eu-west1-b/rack-7" {
		t.Errorf("locality %q from the second source, want eu-west1/eu-west1-b/rack-7", got)
	}
}

// Pod changes reach the registry's endpoints as endpoint-only changes; a
// ServiceEntry that defines the service does not change.
func TestRegistryPodsEndpointOnlyChanges(t *testing.T) {
	store := &fakeStore{}
	idx := model.NewEndpointIndex()
	r := NewRegistry("cluster.local", store, idx, discardLogger())
	const host = "legacy.shop.internal"
	store.set(model.KindServiceEntry, legacyEntry())
	sel := map[string]string{"app": "legacy"}
	p1 := servingPod("shop", "legacy-1", "10.1.0.1", sel)
	p2 := servingPod("shop", "legacy-2", "10.1.0.2", sel)

	if r.SelectsPods() {
		t.Fatal("SelectsPods before any Recompute")
	}
	r.SetPods(kube.NewIndex(kube.Objects{Pods: []*corev1.Pod{p1, p2}}))
	ch := r.Recompute()
	if want := []model.ConfigKey{key(model.KindService, host, "shop")}; !slices.Equal(ch.Services, want) {
		t.Fatalf("first Recompute services %v, want %v", ch.Services, want)
	}
	if !r.SelectsPods() {
		t.Fatal("SelectsPods false with a workloadSelector ServiceEntry")
	}
	if got := addresses(idx, host); !slices.Equal(got, []string{"10.1.0.1", "10.1.0.1", "10.1.0.2", "10.1.0.2"}) {
		t.Fatalf("endpoints %v", got)
	}

	// p2's label changes: it leaves; an endpoint-only change.
	p2b := p2.DeepCopy()
	p2b.Labels = map[string]string{"app": "other"}
	r.SetPods(kube.NewIndex(kube.Objects{Pods: []*corev1.Pod{p1, p2b}}))
	ch = r.Recompute()
	if len(ch.Services) != 0 || !slices.Equal(ch.Endpoints, []model.ConfigKey{key(model.KindEndpoints, host, "shop")}) {
		t.Fatalf("label change reported %+v, want one endpoint-only change", ch)
	}
	if got := addresses(idx, host); !slices.Equal(got, []string{"10.1.0.1", "10.1.0.1"}) {
		t.Fatalf("endpoints after the label change %v", got)
	}
	// Same pods again: nothing.
	if ch := r.Recompute(); !ch.Empty() {
		t.Errorf("unchanged pods reported %+v", ch)
	}
	// The ServiceEntry loses its selector: SelectsPods turns false.
	plain := legacyEntry()
	plain.Spec.(*networking.ServiceEntry).WorkloadSelector = nil
	store.set(model.KindServiceEntry, plain)
	r.Recompute()
	if r.SelectsPods() {
		t.Error("SelectsPods true after the selector went")
	}
}

// SetPods, Recompute and readers race freely (run with -race).
func TestRegistryPodsConcurrent(t *testing.T) {
	store := &fakeStore{}
	store.set(model.KindServiceEntry, legacyEntry())
	idx := model.NewEndpointIndex()
	r := NewRegistry("cluster.local", store, idx, discardLogger())
	sel := map[string]string{"app": "legacy"}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				pods := []*corev1.Pod{servingPod("shop", "p", "10.1.0."+string(rune('1'+(i+j)%5)), sel)}
				r.SetPods(kube.NewIndex(kube.Objects{Pods: pods}))
				r.Recompute()
				_ = r.SelectsPods()
				_ = r.Services()
				_ = idx.Endpoints("legacy.shop.internal")
			}
		}()
	}
	wg.Wait()
	if got := len(idx.Endpoints("legacy.shop.internal")); got != 2 {
		t.Errorf("%d endpoints after the race, want 2 (one pod, two ports)", got)
	}
}
