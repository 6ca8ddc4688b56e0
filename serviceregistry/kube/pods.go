package kube

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Pod lookups for other registries (ServiceEntries whose workloadSelector
// picks Pods). Index answers them from a fixed object set, Controller from
// its informers' caches.

// SelectPods returns the pods of namespace ns ("" reads as "default") whose
// labels include every label of selector, in the order of the object set.
// The pods are shared and must not be changed.
func (x *Index) SelectPods(ns string, selector map[string]string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range x.podsByNS[namespaceOf(ns)] {
		if selects(selector, p.Labels) {
			out = append(out, p)
		}
	}
	return out
}

// PodLocality returns the locality of pod: its istio-locality label, else
// the topology labels of its node when the set holds that node.
func (x *Index) PodLocality(pod *corev1.Pod) string {
	return PodLocality(pod, x.nodes[pod.Spec.NodeName])
}

// SelectPods returns the pods the informers hold in namespace ns whose
// labels include every label of selector; none when discoverySelectors
// leave ns out. The pods are the cache's and must not be changed.
func (c *Controller) SelectPods(ns string, selector map[string]string) []*corev1.Pod {
	if !c.opts.Filter.Selected(ns) {
		return nil
	}
	pods, err := c.pods.Pods(ns).List(labels.SelectorFromSet(selector))
	if err != nil {
		c.opts.Log.Warn("pod lookup failed", "namespace", ns, "error", err)
		return nil
	}
	return pods
}

// AnyPodSelected reports whether a pod of a watched namespace (as
// discoverySelectors decide) carries every label of selector.
func (c *Controller) AnyPodSelected(selector map[string]string) bool {
	pods, err := c.pods.List(labels.SelectorFromSet(selector))
	if err != nil {
		c.opts.Log.Warn("pod lookup failed", "error", err)
		return false
	}
	for _, p := range pods {
		if c.opts.Filter.Selected(p.Namespace) {
			return true
		}
	}
	return false
}

// PodLocality returns the locality of pod: its istio-locality label, else
// the topology labels of its node in the informers' cache.
func (c *Controller) PodLocality(pod *corev1.Pod) string {
	node, err := c.nodes.Get(pod.Spec.NodeName)
	if err != nil {
		node = nil
	}
	return PodLocality(pod, node)
}

// PodServing reports whether pod should receive traffic as an endpoint:
// it has an IP, is not being deleted, runs, and its Ready condition is true.
func PodServing(pod *corev1.Pod) bool {
	return pod.Status.PodIP != "" && pod.DeletionTimestamp == nil && podReady(pod)
}

// podChangeMatters reports whether an update from old to cur changes what a
// Pod contributes as a workload (labels, address, readiness, identity,
// node); status heartbeats do not. A create or delete (either nil) matters.
func podChangeMatters(old, cur *corev1.Pod) bool {
	if old == nil || cur == nil {
		return true
	}
	return !maps.Equal(old.Labels, cur.Labels) ||
		old.Status.PodIP != cur.Status.PodIP ||
		PodServing(old) != PodServing(cur) ||
		old.Spec.ServiceAccountName != cur.Spec.ServiceAccountName ||
		old.Spec.NodeName != cur.Spec.NodeName
}
