package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEndpointsCarryClusterAndWorkload: endpoints built for a cluster carry
// its ID, and the workload name Istio's telemetry uses (a ReplicaSet pod's
// Deployment, else its controller, else the pod).
func TestEndpointsCarryClusterAndWorkload(t *testing.T) {
	yes := true
	owned := func(kind, name string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: name, Controller: &yes}}
		}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"deployment", pod("web-v1-5d8f7c9b4-x2k9p", "shop", "10.0.0.1", map[string]string{"app": "web", "pod-template-hash": "5d8f7c9b4"},
			owned("ReplicaSet", "web-v1-5d8f7c9b4")), "web-v1"},
		{"replica set without the hash label", pod("rs-x", "shop", "10.0.0.1", map[string]string{"app": "web"}, owned("ReplicaSet", "rs")), "rs"},
		{"stateful set", pod("db-0", "shop", "10.0.0.1", map[string]string{"app": "web"}, owned("StatefulSet", "db")), "db"},
		{"bare pod", pod("solo", "shop", "10.0.0.1", map[string]string{"app": "web"}, nil), "solo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := service("web", "shop", nil)
			eps := NewClusterIndex(Objects{Pods: []*corev1.Pod{tc.pod}}, "cluster-2").Endpoints(svc)
			if len(eps) == 0 {
				t.Fatal("no endpoints")
			}
			for _, e := range eps {
				if e.ClusterID != "cluster-2" || e.Workload != tc.want {
					t.Errorf("endpoint %s: cluster %q workload %q, want cluster-2 and %q", e.Address, e.ClusterID, e.Workload, tc.want)
				}
			}
		})
	}
	if eps := NewIndex(Objects{Pods: []*corev1.Pod{pod("solo", "shop", "10.0.0.1", map[string]string{"app": "web"}, nil)}}).Endpoints(service("web", "shop", nil)); len(eps) == 0 || eps[0].ClusterID != "" {
		t.Errorf("NewIndex endpoints %v, want no cluster", eps)
	}
}
