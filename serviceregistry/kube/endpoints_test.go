package kube

import (
	"io"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshpilot/meshpilot/model"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func pod(name, ns, ip string, labels map[string]string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			ServiceAccountName: "web-sa",
			NodeName:           "node-a",
			Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{
				{Name: "web", ContainerPort: 8080},
				{Name: "metrics", ContainerPort: 9090},
			}}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			PodIP: ip,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			},
		},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

var testNodes = []*corev1.Node{
	node("node-a", map[string]string{LabelTopologyRegion: "us-east1", LabelTopologyZone: "us-east1-b", LabelTopologySubzone: "rack1"}),
	node("node-b", map[string]string{LabelTopologyRegion: "us-west1", LabelTopologyZone: "us-west1-a"}),
}

func twoPortService() *corev1.Service {
	return service("web", "shop", func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromString("web")},
			{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090)},
		}
	})
}

func TestFromSlices(t *testing.T) {
	svc := twoPortService()
	web := map[string]string{"app": "web", "version": "v1"}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-abc", Namespace: "shop", Labels: map[string]string{LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		// Slice ports come in any order and map to service ports by name.
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr("metrics"), Port: ptr[int32](9090)},
			{Name: ptr("http"), Port: ptr[int32](8080)},
		},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.1"}, NodeName: ptr("node-a"), Hostname: ptr("web-1"),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-1", Namespace: "shop"}},
			{Addresses: []string{"10.1.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-2"}},
			{Addresses: []string{"10.1.0.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}},
		},
	}
	objs := Objects{
		EndpointSlices: []*discoveryv1.EndpointSlice{slice},
		Pods: []*corev1.Pod{
			pod("web-1", "shop", "10.1.0.1", web, nil),
			pod("web-2", "shop", "10.1.0.2", web, func(p *corev1.Pod) {
				p.Spec.ServiceAccountName = ""
				p.Spec.NodeName = "node-b"
			}),
		},
		Nodes: testNodes,
	}
	got := NewIndex(objs).Endpoints(svc)
	want := []*model.Endpoint{
		{Address: "10.1.0.1", Port: 8080, ServicePortName: "http", Labels: web, ServiceAccount: "web-sa",
			Locality: "us-east1/us-east1-b/rack1", Healthy: true, Namespace: "shop", WorkloadName: "web-1", Workload: "web-1", HostName: "web-1", EndpointSlice: "web-abc"},
		{Address: "10.1.0.1", Port: 9090, ServicePortName: "metrics", Labels: web, ServiceAccount: "web-sa",
			Locality: "us-east1/us-east1-b/rack1", Healthy: true, Namespace: "shop", WorkloadName: "web-1", Workload: "web-1", HostName: "web-1", EndpointSlice: "web-abc"},
		{Address: "10.1.0.2", Port: 8080, ServicePortName: "http", Labels: web, ServiceAccount: "default",
			Locality: "us-west1/us-west1-a", Healthy: false, Namespace: "shop", WorkloadName: "web-2", Workload: "web-2", EndpointSlice: "web-abc"},
		{Address: "10.1.0.2", Port: 9090, ServicePortName: "metrics", Labels: web, ServiceAccount: "default",
			Locality: "us-west1/us-west1-a", Healthy: false, Namespace: "shop", WorkloadName: "web-2", Workload: "web-2", EndpointSlice: "web-abc"},
		{Address: "10.1.0.3", Port: 8080, ServicePortName: "http", Healthy: true, Namespace: "shop", EndpointSlice: "web-abc"},
		{Address: "10.1.0.3", Port: 9090, ServicePortName: "metrics", Healthy: true, Namespace: "shop", EndpointSlice: "web-abc"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
}

func TestFromSlicesSkipsUnmatchedPortsAndFQDN(t *testing.T) {
	svc := twoPortService()
	slices := []*discoveryv1.EndpointSlice{
		{
			ObjectMeta:  metav1.ObjectMeta{Name: "a", Namespace: "shop", Labels: map[string]string{LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}, {Name: ptr("other"), Port: ptr[int32](1)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}},
		},
		{
			ObjectMeta:  metav1.ObjectMeta{Name: "b", Namespace: "shop", Labels: map[string]string{LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeFQDN,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"web.example.com"}}},
		},
		// A duplicate of the first slice's endpoint, ready here and unready
		// there (a slice in transition): the ready one is kept once.
		{
			ObjectMeta:  metav1.ObjectMeta{Name: "c", Namespace: "shop", Labels: map[string]string{LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)}}},
		},
	}
	got := NewIndex(Objects{EndpointSlices: slices}).Endpoints(svc)
	want := []*model.Endpoint{{Address: "10.1.0.1", Port: 8080, ServicePortName: "http", Healthy: true, Namespace: "shop", EndpointSlice: "a"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
}

func TestFromEndpoints(t *testing.T) {
	svc := twoPortService()
	web := map[string]string{"app": "web"}
	eps := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "10.1.0.1", NodeName: ptr("node-b"),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-1", Namespace: "shop"}}},
			NotReadyAddresses: []corev1.EndpointAddress{{IP: "10.1.0.2"}},
			Ports:             []corev1.EndpointPort{{Name: "http", Port: 8080}},
		}},
	}
	objs := Objects{Endpoints: []*corev1.Endpoints{eps}, Pods: []*corev1.Pod{pod("web-1", "shop", "10.1.0.1", web, nil)}, Nodes: testNodes}
	got := NewIndex(objs).Endpoints(svc)
	want := []*model.Endpoint{
		{Address: "10.1.0.1", Port: 8080, ServicePortName: "http", Labels: web, ServiceAccount: "web-sa",
			Locality: "us-west1/us-west1-a", Healthy: true, Namespace: "shop", WorkloadName: "web-1", Workload: "web-1"},
		{Address: "10.1.0.2", Port: 8080, ServicePortName: "http", Healthy: false, Namespace: "shop"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
}

func TestFromPods(t *testing.T) {
	svc := twoPortService()
	v1 := map[string]string{"app": "web", "version": "v1"}
	objs := Objects{
		Nodes: testNodes,
		Pods: []*corev1.Pod{
			pod("web-1", "shop", "10.1.0.1", v1, nil),
			// Running but not ready.
			pod("web-2", "shop", "10.1.0.2", v1, func(p *corev1.Pod) {
				p.Status.Conditions[0].Status = corev1.ConditionFalse
			}),
			// Named target port "web" missing: only the numeric port is served.
			pod("web-3", "shop", "10.1.0.3", v1, func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = nil
				p.Labels = map[string]string{"app": "web", LabelIstioLocality: "eu.eu-1"}
			}),
			// Pending with an IP: unhealthy.
			pod("web-4", "shop", "10.1.0.4", v1, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
			// Not selected: no IP yet, finished, other namespace, other labels.
			pod("web-5", "shop", "", v1, nil),
			pod("web-6", "shop", "10.1.0.6", v1, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
			pod("web-7", "other", "10.1.0.7", v1, nil),
			pod("db-1", "shop", "10.1.0.8", map[string]string{"app": "db"}, nil),
		},
	}
	got := NewIndex(objs).Endpoints(svc)
	loc := "us-east1/us-east1-b/rack1"
	eu := map[string]string{"app": "web", LabelIstioLocality: "eu.eu-1"}
	ep := func(ip string, port uint32, name string, labels map[string]string, locality string, healthy bool, pod string) *model.Endpoint {
		return &model.Endpoint{Address: ip, Port: port, ServicePortName: name, Labels: labels, ServiceAccount: "web-sa",
			Locality: locality, Healthy: healthy, Namespace: "shop", WorkloadName: pod, Workload: pod}
	}
	want := []*model.Endpoint{
		ep("10.1.0.1", 8080, "http", v1, loc, true, "web-1"),
		ep("10.1.0.1", 9090, "metrics", v1, loc, true, "web-1"),
		ep("10.1.0.2", 8080, "http", v1, loc, false, "web-2"),
		ep("10.1.0.2", 9090, "metrics", v1, loc, false, "web-2"),
		ep("10.1.0.3", 9090, "metrics", eu, "eu/eu-1", true, "web-3"),
		ep("10.1.0.4", 8080, "http", v1, loc, false, "web-4"),
		ep("10.1.0.4", 9090, "metrics", v1, loc, false, "web-4"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
}

func TestFromPodsDefaults(t *testing.T) {
	// Unset targetPort means the service port; no selector selects nothing;
	// publishNotReadyAddresses makes unready pods healthy.
	svc := service("web", "shop", func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}}
		s.Spec.PublishNotReadyAddresses = true
	})
	p := pod("web-1", "shop", "10.1.0.1", map[string]string{"app": "web"}, func(p *corev1.Pod) {
		p.Status.Conditions = nil
	})
	idx := NewIndex(Objects{Pods: []*corev1.Pod{p}})
	got := idx.Endpoints(svc)
	if len(got) != 1 || got[0].Port != 80 || !got[0].Healthy {
		t.Fatalf("endpoints = %+v, want one healthy endpoint on port 80", got)
	}
	svc.Spec.Selector = nil
	if got := idx.Endpoints(svc); len(got) != 0 {
		t.Fatalf("service without selector got endpoints %+v", got)
	}
}

func TestEndpointSourcePrecedence(t *testing.T) {
	svc := service("web", "shop", nil)
	p := pod("web-1", "shop", "10.1.0.9", map[string]string{"app": "web"}, nil)
	eps := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "10.1.0.2"}},
			Ports:     []corev1.EndpointPort{{Name: "http", Port: 8080}},
		}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-x", Namespace: "shop", Labels: map[string]string{LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.3"}}},
	}
	cases := []struct {
		name string
		objs Objects
		want string
	}{
		{"pods only", Objects{Pods: []*corev1.Pod{p}}, "10.1.0.9"},
		{"endpoints beat pods", Objects{Pods: []*corev1.Pod{p}, Endpoints: []*corev1.Endpoints{eps}}, "10.1.0.2"},
		{"slices beat endpoints", Objects{Pods: []*corev1.Pod{p}, Endpoints: []*corev1.Endpoints{eps},
			EndpointSlices: []*discoveryv1.EndpointSlice{slice}}, "10.1.0.3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := NewIndex(tc.objs).Endpoints(svc)
			if len(got) != 1 || got[0].Address != tc.want {
				t.Fatalf("endpoints = %+v, want one at %s", got, tc.want)
			}
		})
	}
}

// TestTerminatingPodNotReady: a pod being deleted is not ready even while
// its EndpointSlice still says ready (istio/istio#44985), unless the
// service publishes not-ready addresses.
func TestTerminatingPodNotReady(t *testing.T) {
	web := map[string]string{"app": "web"}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-abc", Namespace: "shop", Labels: map[string]string{LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-1"}},
			{Addresses: []string{"10.1.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-2"}},
		},
	}
	objs := Objects{
		EndpointSlices: []*discoveryv1.EndpointSlice{slice},
		Pods: []*corev1.Pod{
			pod("web-1", "shop", "10.1.0.1", web, nil),
			pod("web-2", "shop", "10.1.0.2", web, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }),
		},
	}
	for _, publish := range []bool{false, true} {
		svc := service("web", "shop", func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}
			s.Spec.PublishNotReadyAddresses = publish
		})
		healthy := map[string]bool{}
		for _, e := range NewIndex(objs).Endpoints(svc) {
			healthy[e.Address] = e.Healthy
		}
		want := map[string]bool{"10.1.0.1": true, "10.1.0.2": publish}
		if diff := cmp.Diff(want, healthy); diff != "" {
			t.Errorf("publishNotReadyAddresses=%v: healthy by address (-want +got):\n%s", publish, diff)
		}
	}
}
