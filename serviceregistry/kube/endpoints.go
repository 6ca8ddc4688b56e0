package kube

import (
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshpilot/meshpilot/model"
)

type nsName struct{ namespace, name string }

// Index groups an Objects set for the lookups endpoint conversion needs:
// slices and Endpoints by service, pods by name and namespace, nodes by name.
// It is read-only once built.
type Index struct {
	slices    map[nsName][]*discoveryv1.EndpointSlice
	endpoints map[nsName]*corev1.Endpoints
	pods      map[nsName]*corev1.Pod
	podsByNS  map[string][]*corev1.Pod
	nodes     map[string]*corev1.Node
	// networks resolves endpoint networks (nil: the pod label alone).
	networks *Networks
	// cluster is the ClusterID of the endpoints built.
	cluster string
}

// NewIndex indexes objs. Objects without a namespace are read as "default".
func NewIndex(objs Objects) *Index { return NewClusterIndex(objs, "") }

// NewClusterIndex is NewIndex for the objects of cluster clusterID: the
// endpoints it builds carry that ClusterID.
func NewClusterIndex(objs Objects, clusterID string) *Index {
	x := &Index{
		cluster:   clusterID,
		slices:    map[nsName][]*discoveryv1.EndpointSlice{},
		endpoints: map[nsName]*corev1.Endpoints{},
		pods:      map[nsName]*corev1.Pod{},
		podsByNS:  map[string][]*corev1.Pod{},
		nodes:     map[string]*corev1.Node{},
	}
	for _, s := range objs.EndpointSlices {
		svc := s.Labels[LabelServiceName]
		if svc == "" {
			continue
		}
		k := nsName{namespaceOf(s.Namespace), svc}
		x.slices[k] = append(x.slices[k], s)
	}
	for _, e := range objs.Endpoints {
		x.endpoints[nsName{namespaceOf(e.Namespace), e.Name}] = e
	}
	for _, p := range objs.Pods {
		ns := namespaceOf(p.Namespace)
		x.pods[nsName{ns, p.Name}] = p
		x.podsByNS[ns] = append(x.podsByNS[ns], p)
	}
	for _, n := range objs.Nodes {
		x.nodes[n.Name] = n
	}
	return x
}

// Endpoints returns the endpoints of svc, one per (address, service port):
// DNS endpoints for an ExternalName service, else from its EndpointSlices,
// else from its legacy Endpoints, else from the pods its selector picks.
func (x *Index) Endpoints(svc *corev1.Service) []*model.Endpoint {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return ExternalNameEndpoints(svc)
	}
	k := nsName{namespaceOf(svc.Namespace), svc.Name}
	if slices := x.slices[k]; len(slices) > 0 {
		return x.FromSlices(svc, slices)
	}
	if eps := x.endpoints[k]; eps != nil {
		return x.FromEndpoints(svc, eps)
	}
	return x.FromPods(svc)
}

// FromSlices converts the EndpointSlices of svc. Slice ports map to service
// ports by name; readiness comes from conditions.ready (unset = ready);
// FQDN slices are ignored.
func (x *Index) FromSlices(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) []*model.Endpoint {
	var set endpointSet
	for _, sl := range slices {
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		ports := matchSlicePorts(svc, sl.Ports)
		for _, e := range sl.Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			node := ""
			if e.NodeName != nil {
				node = *e.NodeName
			}
			host := ""
			if e.Hostname != nil {
				host = *e.Hostname
			}
			for _, addr := range e.Addresses {
				for _, p := range ports {
					ep := x.endpoint(svc, addr, p, ready, e.TargetRef, node)
					ep.HostName = host
					ep.EndpointSlice = sl.Name
					set.add(ep)
				}
			}
		}
	}
	return set.list
}

// FromEndpoints converts the legacy Endpoints of svc. Ports map by name;
// NotReadyAddresses become unhealthy endpoints.
func (x *Index) FromEndpoints(svc *corev1.Service, eps *corev1.Endpoints) []*model.Endpoint {
	var set endpointSet
	for _, sub := range eps.Subsets {
		ports := matchEndpointsPorts(svc, sub.Ports)
		add := func(addrs []corev1.EndpointAddress, ready bool) {
			for _, a := range addrs {
				node := ""
				if a.NodeName != nil {
					node = *a.NodeName
				}
				for _, p := range ports {
					ep := x.endpoint(svc, a.IP, p, ready, a.TargetRef, node)
					ep.HostName = a.Hostname
					set.add(ep)
				}
			}
		}
		add(sub.Addresses, true)
		add(sub.NotReadyAddresses, false)
	}
	return set.list
}

// FromPods builds the endpoints of svc from the pods in its namespace that
// its selector matches, as the endpoints controller would: the pod IP, the
// target port resolved against the pod's container ports, ready when the
// pod runs and its Ready condition is true. A service without a selector
// selects nothing.
func (x *Index) FromPods(svc *corev1.Service) []*model.Endpoint {
	if len(svc.Spec.Selector) == 0 {
		return nil
	}
	var set endpointSet
	for _, pod := range x.podsByNS[namespaceOf(svc.Namespace)] {
		if !selects(svc.Spec.Selector, pod.Labels) || pod.Status.PodIP == "" ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		ready := podReady(pod)
		ref := &corev1.ObjectReference{Kind: "Pod", Name: pod.Name, Namespace: pod.Namespace}
		for _, sp := range svc.Spec.Ports {
			target, ok := resolveTargetPort(sp, pod)
			if !ok {
				continue
			}
			p := portMatch{name: sp.Name, target: target}
			ep := x.endpoint(svc, pod.Status.PodIP, p, ready, ref, pod.Spec.NodeName)
			if pod.Spec.Subdomain == svc.Name {
				ep.HostName = pod.Spec.Hostname // as the endpoints controller sets it
			}
			set.add(ep)
		}
	}
	return set.list
}

// portMatch pairs a service port name with the port the workload listens on.
type portMatch struct {
	name   string
	target uint32
}

func matchSlicePorts(svc *corev1.Service, ports []discoveryv1.EndpointPort) []portMatch {
	var out []portMatch
	for _, sp := range svc.Spec.Ports {
		for _, p := range ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			if name == sp.Name && proto == protocolOf(sp) && p.Port != nil {
				out = append(out, portMatch{name: sp.Name, target: uint32(*p.Port)})
				break
			}
		}
	}
	return out
}

func matchEndpointsPorts(svc *corev1.Service, ports []corev1.EndpointPort) []portMatch {
	var out []portMatch
	for _, sp := range svc.Spec.Ports {
		for _, p := range ports {
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			if p.Name == sp.Name && proto == protocolOf(sp) {
				out = append(out, portMatch{name: sp.Name, target: uint32(p.Port)})
				break
			}
		}
	}
	return out
}

func protocolOf(sp corev1.ServicePort) corev1.Protocol {
	if sp.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return sp.Protocol
}

// resolveTargetPort returns the pod port a service port forwards to: a
// number, a named container port, or the service port when unset.
func resolveTargetPort(sp corev1.ServicePort, pod *corev1.Pod) (uint32, bool) {
	tp := sp.TargetPort
	if tp.Type == intstr.Int {
		if tp.IntVal == 0 {
			return uint32(sp.Port), true
		}
		return uint32(tp.IntVal), true
	}
	if tp.StrVal == "" {
		return uint32(sp.Port), true
	}
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == tp.StrVal && protocolOfContainer(cp) == protocolOf(sp) {
				return uint32(cp.ContainerPort), true
			}
		}
	}
	return 0, false
}

func protocolOfContainer(cp corev1.ContainerPort) corev1.Protocol {
	if cp.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return cp.Protocol
}

func podReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// endpoint builds one endpoint; workload facts come from the referenced pod
// when the index holds it, and a pod being deleted is not ready.
func (x *Index) endpoint(svc *corev1.Service, addr string, p portMatch, ready bool, ref *corev1.ObjectReference, node string) *model.Endpoint {
	ns := namespaceOf(svc.Namespace)
	ep := &model.Endpoint{
		Address:         addr,
		Port:            p.target,
		ServicePortName: p.name,
		Healthy:         ready || svc.Spec.PublishNotReadyAddresses,
		Namespace:       ns,
		ClusterID:       x.cluster,
	}
	var pod *corev1.Pod
	if ref != nil && (ref.Kind == "" || ref.Kind == "Pod") {
		refNS := ns
		if ref.Namespace != "" {
			refNS = ref.Namespace
		}
		pod = x.pods[nsName{refNS, ref.Name}]
	}
	if pod != nil {
		if pod.DeletionTimestamp != nil && !svc.Spec.PublishNotReadyAddresses {
			// A terminating pod leaves at once, before the EndpointSlice
			// controller marks it (istio/istio#44985).
			ep.Healthy = false
		}
		ep.Labels = maps.Clone(pod.Labels)
		ep.ServiceAccount = pod.Spec.ServiceAccountName
		if ep.ServiceAccount == "" {
			ep.ServiceAccount = "default"
		}
		ep.Namespace = namespaceOf(pod.Namespace)
		ep.WorkloadName = pod.Name
		ep.Workload = workloadOf(pod)
		if node == "" {
			node = pod.Spec.NodeName
		}
	}
	ep.Locality = x.locality(pod, node)
	ep.Network = x.networks.Network(addr, ep.Namespace, ep.Labels)
	return ep
}

// WithNetworks makes x resolve endpoint networks with n (see Networks);
// it returns x.
func (x *Index) WithNetworks(n *Networks) *Index {
	x.networks = n
	return x
}

// locality returns the locality of an endpoint of pod on node (see
// PodLocality); pod may be nil.
func (x *Index) locality(pod *corev1.Pod, node string) string {
	return PodLocality(pod, x.nodes[node])
}

// PodLocality returns "region/zone/subzone" (trailing empty levels dropped)
// for a workload: pod's istio-locality label when set, else the topology
// labels of node (which may be nil, as may pod).
func PodLocality(pod *corev1.Pod, node *corev1.Node) string {
	if pod != nil {
		if l := pod.Labels[LabelIstioLocality]; l != "" {
			return strings.TrimRight(strings.ReplaceAll(l, ".", "/"), "/")
		}
	}
	if node == nil {
		return ""
	}
	region := firstLabel(node.Labels, LabelTopologyRegion, labelRegionDeprecated)
	zone := firstLabel(node.Labels, LabelTopologyZone, labelZoneDeprecated)
	subzone := node.Labels[LabelTopologySubzone]
	return strings.TrimRight(region+"/"+zone+"/"+subzone, "/")
}

func firstLabel(labels map[string]string, keys ...string) string {
	for _, k := range keys {
		if v := labels[k]; v != "" {
			return v
		}
	}
	return ""
}

// endpointSet collects endpoints without duplicates (by Key); a ready
// duplicate replaces an unready one.
type endpointSet struct {
	index map[string]int
	list  []*model.Endpoint
}

func (s *endpointSet) add(e *model.Endpoint) {
	if s.index == nil {
		s.index = map[string]int{}
	}
	k := e.Key()
	if i, ok := s.index[k]; ok {
		if e.Healthy && !s.list[i].Healthy {
			s.list[i] = e
		}
		return
	}
	s.index[k] = len(s.list)
	s.list = append(s.list, e)
}

// workloadOf names the workload of pod as Istio's telemetry does: the
// controller in its owner references, a ReplicaSet read as its Deployment
// (the name less "-" and the pod-template-hash label), else the pod.
func workloadOf(pod *corev1.Pod) string {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		if ref.Kind == "ReplicaSet" {
			if hash := pod.Labels[labelPodTemplateHash]; hash != "" {
				if name, ok := strings.CutSuffix(ref.Name, "-"+hash); ok {
					return name
				}
			}
		}
		return ref.Name
	}
	return pod.Name
}
