package kube

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Objects is a set of Kubernetes objects that describe services and their
// endpoints: what informers hold, or what a directory of manifests declares.
type Objects struct {
	Services       []*corev1.Service
	Endpoints      []*corev1.Endpoints
	EndpointSlices []*discoveryv1.EndpointSlice
	Pods           []*corev1.Pod
	Nodes          []*corev1.Node
}
