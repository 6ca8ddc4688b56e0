package kube

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Event handlers run on the informers' goroutines: they only mark the
// services an event can affect; process does the work.

func (c *Controller) onService(old, cur any) {
	for _, o := range []any{old, cur} {
		if s, ok := o.(*corev1.Service); ok {
			c.mark(nsName{s.Namespace, s.Name})
		}
	}
}

func (c *Controller) onSlice(old, cur any) {
	for _, o := range []any{old, cur} {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok && s.Labels[LabelServiceName] != "" {
			c.mark(nsName{s.Namespace, s.Labels[LabelServiceName]})
		}
	}
}

// onPod marks the services whose selector picks the pod before or after
// the change (labels, readiness, IP, service account all feed endpoints).
func (c *Controller) onPod(old, cur any) {
	o, _ := old.(*corev1.Pod)
	n, _ := cur.(*corev1.Pod)
	if (o != nil || n != nil) && podChangeMatters(o, n) {
		c.markPods()
	}
	var keys []nsName
	for _, o := range []any{old, cur} {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		svcs, _ := c.services.Services(p.Namespace).List(labels.Everything())
		for _, s := range svcs {
			if selects(s.Spec.Selector, p.Labels) {
				keys = append(keys, nsName{s.Namespace, s.Name})
			}
		}
	}
	if len(keys) > 0 {
		c.mark(keys...)
	}
}

// onNode recomputes everything when a node appears, goes, or changes its
// labels (locality); other node updates (status heartbeats) are ignored.
func (c *Controller) onNode(old, cur any) {
	o, _ := old.(*corev1.Node)
	n, _ := cur.(*corev1.Node)
	if o != nil && n != nil && maps.Equal(o.Labels, n.Labels) {
		return
	}
	c.markAll()
}

// onNamespace feeds the namespace filter, which calls markAll when the
// selected set changed, and the network resolver (see onNetworkLabel).
func (c *Controller) onNamespace(old, cur any) {
	if ns, ok := cur.(*corev1.Namespace); ok {
		c.opts.Filter.OnNamespace(ns.Name, ns)
		c.onNetworkLabel(ns.Name, ns.Labels)
	} else if ns, ok := old.(*corev1.Namespace); ok {
		c.opts.Filter.OnNamespace(ns.Name, nil)
		c.onNetworkLabel(ns.Name, nil)
	}
}
