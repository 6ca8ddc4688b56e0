package serviceentry

import (
	"maps"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/serviceregistry/kube"
)

// PodSource answers the Pod lookups of a ServiceEntry workloadSelector.
// kube.Index (manifest files) and kube.Controller (informers) implement it.
type PodSource interface {
	// SelectPods returns the pods of namespace whose labels include every
	// label of selector. The pods are shared and must not be changed.
	SelectPods(namespace string, selector map[string]string) []*corev1.Pod
	// PodLocality returns "region/zone/subzone" of pod, possibly empty.
	PodLocality(pod *corev1.Pod) string
}

// PodSources is a PodSource over several sources (a cluster and manifest
// files), each asked in order; a pod is taken once per namespace and name,
// from the first source that holds it.
type PodSources []PodSource

// SelectPods returns the pods every source selects, first source first.
func (ps PodSources) SelectPods(namespace string, selector map[string]string) []*corev1.Pod {
	var out []*corev1.Pod
	seen := map[string]bool{}
	for _, s := range ps {
		for _, p := range s.SelectPods(namespace, selector) {
			if !seen[p.Name] {
				seen[p.Name] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// PodLocality returns the first non-empty locality a source gives pod.
func (ps PodSources) PodLocality(pod *corev1.Pod) string {
	for _, s := range ps {
		if l := s.PodLocality(pod); l != "" {
			return l
		}
	}
	return ""
}

// PodEndpoints returns the endpoints of the Pods that the workloadSelector
// of ServiceEntry cfg selects in its own namespace, as Istio does: one per
// serving pod (an IP, running, Ready, not being deleted) and ServiceEntry
// port. The address is the pod IP; the port is the pod's TCP container port
// named as the ServiceEntry port, else the port's targetPort, else its
// number; labels are the pod's (security.istio.io/tlsMode included, which
// auto-mTLS reads); the service account (default "default") gives the
// SPIFFE identity; the locality is the pod's istio-locality label or its
// node's topology labels. A config without a workloadSelector, or a nil
// source, yields nil.
func PodEndpoints(cfg *model.Config, pods PodSource) []*model.Endpoint {
	se, ok := cfg.Spec.(*networking.ServiceEntry)
	if !ok || se == nil || se.GetWorkloadSelector() == nil || pods == nil {
		return nil
	}
	var out []*model.Endpoint
	for _, pod := range pods.SelectPods(cfg.Namespace, se.GetWorkloadSelector().GetLabels()) {
		if pod.Namespace != cfg.Namespace && !(pod.Namespace == "" && cfg.Namespace == "default") {
			continue // a source must not widen the selection across namespaces
		}
		if !kube.PodServing(pod) {
			continue
		}
		out = append(out, podEndpoints(se, pod, cfg.Namespace, pods.PodLocality(pod))...)
	}
	return out
}

func podEndpoints(se *networking.ServiceEntry, pod *corev1.Pod, ns, locality string) []*model.Endpoint {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	named := containerPorts(pod)
	out := make([]*model.Endpoint, 0, len(se.GetPorts()))
	for _, p := range se.GetPorts() {
		out = append(out, &model.Endpoint{
			Address:         pod.Status.PodIP,
			Port:            targetPort(p, named),
			ServicePortName: p.GetName(),
			Labels:          maps.Clone(pod.Labels),
			ServiceAccount:  sa,
			Locality:        locality,
			Healthy:         true,
			Namespace:       ns,
			WorkloadName:    pod.Name,
			Network:         pod.Labels[model.LabelTopologyNetwork],
		})
	}
	return out
}

// containerPorts maps the names of pod's TCP container ports to their
// numbers; the first container declaring a name wins, as in Kubernetes.
func containerPorts(pod *corev1.Pod) map[string]uint32 {
	out := map[string]uint32{}
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "" || (cp.Protocol != "" && cp.Protocol != corev1.ProtocolTCP) {
				continue
			}
			if _, dup := out[cp.Name]; !dup && cp.ContainerPort > 0 {
				out[cp.Name] = uint32(cp.ContainerPort)
			}
		}
	}
	return out
}
