package workload

import (
	"fmt"
	"net/netip"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SliceEndpoint is one address of a generated EndpointSlice and the Pod
// behind it.
type SliceEndpoint struct {
	IP    netip.Addr
	Pod   string
	Ready bool
}

// PodName returns the name of pod k of service i at rollout generation gen
// (0 for the generated workload, then one more per replacement).
func PodName(i, k, gen int) string {
	if gen == 0 {
		return fmt.Sprintf("%s-%d", ServiceName(i), k)
	}
	return fmt.Sprintf("%s-%d-g%d", ServiceName(i), k, gen)
}

// SliceName returns the name of service i's EndpointSlice.
func SliceName(i int) string { return ServiceName(i) + "-load" }

// EndpointSlice returns service i's EndpointSlice holding eps, written as
// the endpointslice controller would: a targetRef to the Pod when named,
// the readiness condition, the service-name label.
func (o Options) EndpointSlice(i int, eps []SliceEndpoint) Object {
	svc, ns := ServiceName(i), o.ServiceNamespace(i)
	slice := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: SliceName(i), Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc,
			discoveryv1.LabelManagedBy:   "pilot-load",
			"generated-by":               "pilot-load",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(TargetPort)), Protocol: ptr(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{
			Addresses:  []string{e.IP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(e.Ready)},
		}
		if e.Pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.Pod}
		}
		slice.Endpoints = append(slice.Endpoints, ep)
	}
	return Object{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice", Namespace: ns, Name: SliceName(i), Body: slice}
}

// Pod returns a running Pod of service i (labels app, version of slot k)
// with address ip, as the kubelet would report it. Its status goes through
// the status subresource when applied.
func (o Options) Pod(i, k int, name string, ip netip.Addr) Object {
	ns := o.ServiceNamespace(i)
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			"app": ServiceName(i), "version": version(k), "generated-by": "pilot-load",
		}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "default",
			Containers: []corev1.Container{{
				Name: "app", Image: "pilot-load/app",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: TargetPort, Protocol: corev1.ProtocolTCP}},
			}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      ip.String(),
			PodIPs:     []corev1.PodIP{{IP: ip.String()}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	return Object{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name, Body: pod}
}

// initialEndpoints returns service i's generated endpoints, with Pods
// named when o.Pods.
func (o Options) initialEndpoints(i int) []SliceEndpoint {
	eps := make([]SliceEndpoint, 0, o.Endpoints)
	for k := range o.Endpoints {
		e := SliceEndpoint{IP: o.EndpointIP(i, k), Ready: true}
		if o.Pods {
			e.Pod = PodName(i, k, 0)
		}
		eps = append(eps, e)
	}
	return eps
}

// selectorServiceEntry returns service i as a STATIC, MESH_INTERNAL
// ServiceEntry without endpoints that selects its WorkloadEntries by label.
func (o Options) selectorServiceEntry(i int) Object {
	se := &networking.ServiceEntry{
		Hosts:            []string{o.Host(i)},
		Location:         networking.ServiceEntry_MESH_INTERNAL,
		Resolution:       networking.ServiceEntry_STATIC,
		Ports:            []*networking.ServicePort{{Number: ServicePort, Name: "http", Protocol: "HTTP", TargetPort: TargetPort}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": ServiceName(i)}},
	}
	return newIstio("ServiceEntry", o.ServiceNamespace(i), ServiceName(i), generatedLabels(ServiceName(i)), se)
}

// workloadEntry returns endpoint k of service i as a WorkloadEntry
// labelled for service i's selector.
func (o Options) workloadEntry(i, k int) Object {
	we := &networking.WorkloadEntry{
		Address:        o.EndpointIP(i, k).String(),
		Labels:         map[string]string{"app": ServiceName(i), "version": version(k)},
		ServiceAccount: "default",
	}
	return newIstio("WorkloadEntry", o.ServiceNamespace(i), PodName(i, k, 0), generatedLabels(ServiceName(i)), we)
}

// ReplacementIP returns the address of the n-th replacement Pod of a churn
// run, in 100.64.0.0/10, apart from every generated address.
func ReplacementIP(n int) netip.Addr { return offsetIP(100, 64, n%(1<<22-2)+1) }
