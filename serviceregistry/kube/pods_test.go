package kube

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func podNames(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func TestIndexSelectPods(t *testing.T) {
	idx := NewIndex(Objects{
		Pods: []*corev1.Pod{
			pod("a", "shop", "10.0.0.1", map[string]string{"app": "legacy", "v": "1"}, nil),
			pod("b", "shop", "10.0.0.2", map[string]string{"app": "web"}, nil),
			pod("c", "other", "10.0.0.3", map[string]string{"app": "legacy"}, nil),
			pod("d", "", "10.0.0.4", map[string]string{"app": "legacy"}, nil),
		},
		Nodes: testNodes,
	})
	if got := podNames(idx.SelectPods("shop", map[string]string{"app": "legacy"})); !slices.Equal(got, []string{"shop/a"}) {
		t.Errorf("shop app=legacy selected %v", got)
	}
	if got := podNames(idx.SelectPods("default", map[string]string{"app": "legacy"})); !slices.Equal(got, []string{"/d"}) {
		t.Errorf("default app=legacy selected %v (a pod without namespace is in default)", got)
	}
	if got := podNames(idx.SelectPods("shop", nil)); !slices.Equal(got, []string{"shop/a", "shop/b"}) {
		t.Errorf("empty selector selected %v, want every pod of shop", got)
	}
	p := pod("a", "shop", "10.0.0.1", nil, nil)
	if got := idx.PodLocality(p); got != "us-east1/us-east1-b/rack1" {
		t.Errorf("locality %q from node-a", got)
	}
	p.Labels = map[string]string{LabelIstioLocality: "r.z"}
	if got := idx.PodLocality(p); got != "r/z" {
		t.Errorf("locality %q, want the istio-locality label r/z", got)
	}
	p.Spec.NodeName = "unknown"
	p.Labels = nil
	if got := idx.PodLocality(p); got != "" {
		t.Errorf("locality %q for an unknown node, want empty", got)
	}
}

func TestPodServingAndChangeMatters(t *testing.T) {
	base := pod("a", "shop", "10.0.0.1", map[string]string{"app": "legacy"}, nil)
	if !PodServing(base) {
		t.Fatal("running ready pod with an IP not serving")
	}
	cases := []struct {
		name    string
		mutate  func(*corev1.Pod)
		serving bool
		matters bool
	}{
		{"status heartbeat", func(p *corev1.Pod) { p.Status.HostIP = "192.168.0.9"; p.ResourceVersion = "9" }, true, false},
		{"label", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web"} }, true, true},
		{"ip", func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.2" }, true, true},
		{"no ip", func(p *corev1.Pod) { p.Status.PodIP = "" }, false, true},
		{"not ready", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }, false, true},
		{"pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, false, true},
		{"deleting", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }, false, true},
		{"service account", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "other" }, true, true},
		{"node", func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }, true, true},
	}
	for _, tc := range cases {
		p := base.DeepCopy()
		tc.mutate(p)
		if got := PodServing(p); got != tc.serving {
			t.Errorf("%s: PodServing = %v, want %v", tc.name, got, tc.serving)
		}
		if got := podChangeMatters(base, p); got != tc.matters {
			t.Errorf("%s: podChangeMatters = %v, want %v", tc.name, got, tc.matters)
		}
	}
	if !podChangeMatters(nil, base) || !podChangeMatters(base, nil) {
		t.Error("create or delete does not matter")
	}
}
