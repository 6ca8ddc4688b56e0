package kube

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNamespaceLabels: the filter serves each namespace's labels (the
// Gateway API's allowedRoutes selectors read them; conformance
// HTTPRouteCrossNamespace) and tells label subscribers of every change of
// labels, and of none when they stay the same.
func TestNamespaceLabels(t *testing.T) {
	f := NewNamespaceFilter()
	calls := 0
	f.SubscribeLabels(func() { calls++ })
	ns := func(l map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: l}}
	}
	f.OnNamespace("web", ns(map[string]string{"gateway-conformance": "web-backend"}))
	if got := f.Labels("web"); !maps.Equal(got, map[string]string{"gateway-conformance": "web-backend"}) {
		t.Errorf("labels %v", got)
	}
	f.OnNamespace("web", ns(map[string]string{"gateway-conformance": "web-backend"}))
	f.OnNamespace("web", ns(map[string]string{"gateway-conformance": "other"}))
	f.OnNamespace("web", nil)
	if got := f.Labels("web"); got != nil {
		t.Errorf("labels after delete %v, want nil", got)
	}
	if calls != 3 {
		t.Errorf("label subscribers called %d times, want 3 (add, change, delete)", calls)
	}
}
