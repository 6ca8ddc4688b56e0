package workload

import (
	"encoding/json"
	"fmt"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const istioAPIVersion = "networking.istio.io/v1"

// istioObject is an Istio resource as users write it: no status, the spec
// in istio.io/api's JSON form.
type istioObject struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            json.Marshaler    `json:"spec"`
}

func newIstio(kind, ns, name string, labels map[string]string, spec json.Marshaler) Object {
	return Object{APIVersion: istioAPIVersion, Kind: kind, Namespace: ns, Name: name, Body: &istioObject{
		TypeMeta: metav1.TypeMeta{APIVersion: istioAPIVersion, Kind: kind},
		Metadata: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:     spec,
	}}
}

// generatedLabels mark everything pilot-load writes.
func generatedLabels(app string) map[string]string {
	return map[string]string{"app": app, "generated-by": "pilot-load"}
}

func namespaceObject(name string) Object {
	return Object{APIVersion: "v1", Kind: "Namespace", Name: name, Body: &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"generated-by": "pilot-load"}},
	}}
}

// version returns the version label of endpoint k: v1 and v2 alternate.
func version(k int) string { return fmt.Sprintf("v%d", k%2+1) }

func (o Options) serviceEntry(i int) Object {
	se := &networking.ServiceEntry{
		Hosts:      []string{o.Host(i)},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
		Ports:      []*networking.ServicePort{{Number: ServicePort, Name: "http", Protocol: "HTTP", TargetPort: TargetPort}},
	}
	for k := range o.Endpoints {
		se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{
			Address: o.EndpointIP(i, k).String(),
			Labels:  map[string]string{"app": ServiceName(i), "version": version(k)},
		})
	}
	return newIstio("ServiceEntry", o.ServiceNamespace(i), ServiceName(i), generatedLabels(ServiceName(i)), se)
}

func (o Options) kubeService(i int) Object {
	name, ns := ServiceName(i), o.ServiceNamespace(i)
	return Object{APIVersion: "v1", Kind: "Service", Namespace: ns, Name: name, Body: &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: generatedLabels(name)},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  o.clusterIP(i),
			ClusterIPs: []string{o.clusterIP(i)},
			Selector:   map[string]string{"app": name},
			Ports: []corev1.ServicePort{{
				Name: "http", Port: ServicePort, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(TargetPort),
			}},
		},
	}}
}

// clusterIP is service i's ClusterIP, or "None" for a headless service.
func (o Options) clusterIP(i int) string {
	if o.Headless {
		return corev1.ClusterIPNone
	}
	return ClusterIP(i).String()
}

func (o Options) virtualService(i int) Object {
	host := o.Host(i)
	dest := func(subset string, weight int32) *networking.HTTPRouteDestination {
		d := &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: host, Port: &networking.PortSelector{Number: ServicePort}}, Weight: weight}
		if o.DestinationRules {
			d.Destination.Subset = subset
		}
		return d
	}
	canary := []*networking.HTTPRouteDestination{dest("v2", 0)}
	main := []*networking.HTTPRouteDestination{dest("v1", 90), dest("v2", 10)}
	if !o.DestinationRules {
		main = []*networking.HTTPRouteDestination{dest("", 0)}
	}
	vs := &networking.VirtualService{
		Hosts: []string{host},
		Http: []*networking.HTTPRoute{
			{
				Name:  "canary",
				Match: []*networking.HTTPMatchRequest{{Headers: map[string]*networking.StringMatch{"x-load-canary": {MatchType: &networking.StringMatch_Exact{Exact: "true"}}}}},
				Route: canary,
			},
			{Name: "default", Route: main},
		},
	}
	return newIstio("VirtualService", o.ServiceNamespace(i), ServiceName(i), generatedLabels(ServiceName(i)), vs)
}

func (o Options) destinationRule(i int) Object {
	dr := &networking.DestinationRule{
		Host: o.Host(i),
		TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST}},
		},
		Subsets: []*networking.Subset{
			{Name: "v1", Labels: map[string]string{"version": "v1"}},
			{Name: "v2", Labels: map[string]string{"version": "v2"}},
		},
	}
	return newIstio("DestinationRule", o.ServiceNamespace(i), ServiceName(i), generatedLabels(ServiceName(i)), dr)
}

// sidecar limits a namespace's proxies to its own services, the control
// plane's namespace and the markers pilot-load adds.
func sidecar(ns string) Object {
	sc := &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*", "istio-system/*", MarkerNamespace + "/*"}}}}
	return newIstio("Sidecar", ns, "default", map[string]string{"generated-by": "pilot-load"}, sc)
}

// MarkerNamespace holds the marker ServiceEntries of change measurements.
const MarkerNamespace = "load-markers"

// MarkerName returns the name of marker i.
func MarkerName(i int) string { return fmt.Sprintf("marker-%d", i) }

// MarkerHost returns the host of marker i.
func MarkerHost(i int) string { return fmt.Sprintf("marker-%d.%s", i, ServiceEntryDomain) }

// MarkerCluster returns the cluster a proxy gets for marker i.
func MarkerCluster(i int) string { return fmt.Sprintf("outbound|%d||%s", ServicePort, MarkerHost(i)) }

// MarkerNamespaceObject returns the namespace of the markers.
func MarkerNamespaceObject() Object { return namespaceObject(MarkerNamespace) }

// Marker returns marker i: a STATIC ServiceEntry with one endpoint whose
// arrival at a proxy's CDS marks that the proxy saw change i.
func Marker(i int) Object {
	se := &networking.ServiceEntry{
		Hosts:      []string{MarkerHost(i)},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
		Ports:      []*networking.ServicePort{{Number: ServicePort, Name: "http", Protocol: "HTTP"}},
		Endpoints:  []*networking.WorkloadEntry{{Address: offsetIP(10, 127, i+1).String()}},
	}
	return newIstio("ServiceEntry", MarkerNamespace, MarkerName(i), map[string]string{"generated-by": "pilot-load"}, se)
}

func ptr[T any](v T) *T { return &v }
