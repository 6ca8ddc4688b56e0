package kube

import (
	"k8s.io/apimachinery/pkg/labels"
	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// NodesSupportNativeSidecars reports whether every known node's kubelet
// runs native sidecars, so a pod injected with one starts wherever it is
// scheduled. A node whose version cannot be parsed counts as too old; no
// nodes at all (none synced, or a control plane outside the cluster)
// counts as support. It lists the node informer's cache, a few hundred
// microseconds for thousands of nodes, once per injected pod.
func (c *Controller) NodesSupportNativeSidecars() bool {
	// Kubernetes 1.29 is the first whose kubelet runs native sidecars (init
	// containers with restartPolicy: Always) with SidecarContainers on by
	// default (beta).
	minKubelet := utilversion.MajorMinor(1, 29)
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return false
	}
	for _, n := range nodes {
		v, err := utilversion.ParseGeneric(n.Status.NodeInfo.KubeletVersion)
		if err != nil || v.LessThan(minKubelet) {
			return false
		}
	}
	return true
}
