// Package kube converts Kubernetes Services, EndpointSlices, Endpoints and
// Pods into the mesh model. It offers a static registry over such a set
// (Registry, for manifest files) and an informer-fed one (Controller, for a
// live cluster) that recomputes only the services an event touches, with a
// NamespaceFilter for MeshConfig discoverySelectors.
package kube

import (
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/model"
)

// Annotation and label keys Istio reads from Kubernetes objects.
const (
	// AnnotationExportTo lists the namespaces a Service is visible to.
	AnnotationExportTo = "networking.istio.io/exportTo"
	// LabelServiceName ties an EndpointSlice to its Service.
	LabelServiceName = "kubernetes.io/service-name"
	// LabelTopologyRegion and LabelTopologyZone are the node topology labels.
	LabelTopologyRegion = "topology.kubernetes.io/region"
	LabelTopologyZone   = "topology.kubernetes.io/zone"
	// LabelTopologySubzone is Istio's node label for the third locality level.
	LabelTopologySubzone = "topology.istio.io/subzone"
	// LabelIstioLocality on a pod overrides the node's locality ("region.zone.subzone").
	LabelIstioLocality = "istio-locality"

	// labelPodTemplateHash is the ReplicaSet hash a Deployment's pods carry.
	labelPodTemplateHash = "pod-template-hash"

	labelRegionDeprecated = "failure-domain.beta.kubernetes.io/region"
	labelZoneDeprecated   = "failure-domain.beta.kubernetes.io/zone"
)

// DefaultNamespace is used for objects that carry no namespace (manifest files).
const DefaultNamespace = "default"

// ServiceHostname returns the FQDN of a Kubernetes service: NAME.NS.svc.DOMAIN.
func ServiceHostname(name, namespace, domain string) string {
	return name + "." + namespace + ".svc." + domain
}

// ConvertService converts a Kubernetes Service into a model.Service. An empty
// namespace is read as "default". The result shares no memory with svc.
func ConvertService(svc *corev1.Service, domain string) *model.Service {
	ns := namespaceOf(svc.Namespace)
	out := &model.Service{
		Hostname:        ServiceHostname(svc.Name, ns, domain),
		Name:            svc.Name,
		Namespace:       ns,
		Address:         svc.Spec.ClusterIP,
		Resolution:      model.ClientSideLB,
		Labels:          maps.Clone(svc.Labels),
		Selector:        maps.Clone(svc.Spec.Selector),
		ExportTo:        parseExportTo(svc.Annotations[AnnotationExportTo]),
		Registry:        model.RegistryKubernetes,
		ResourceVersion: svc.ResourceVersion,
	}
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		out.Address = ""
		out.Resolution = model.DNSLB
		out.MeshExternal = true
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		out.Address = ""
		out.Resolution = model.Passthrough
	}
	out.Ports = make([]model.Port, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		out.Ports = append(out.Ports, model.Port{
			Name:     p.Name,
			Port:     uint32(p.Port),
			Protocol: portProtocol(p),
		})
	}
	model.SortPorts(out.Ports)
	out.ExternalAddresses = externalAddresses(svc)
	out.LoadBalancer = svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	return out
}

// ExternalNameEndpoints returns, for an ExternalName service, one endpoint
// per port whose address is the external name (the proxy resolves it).
// Other services get nil.
func ExternalNameEndpoints(svc *corev1.Service) []*model.Endpoint {
	if svc.Spec.Type != corev1.ServiceTypeExternalName || svc.Spec.ExternalName == "" {
		return nil
	}
	out := make([]*model.Endpoint, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		out = append(out, &model.Endpoint{
			Address:         svc.Spec.ExternalName,
			Port:            uint32(p.Port),
			ServicePortName: p.Name,
			Healthy:         true,
			Namespace:       namespaceOf(svc.Namespace),
		})
	}
	return out
}

func portProtocol(p corev1.ServicePort) model.Protocol {
	if p.Protocol == corev1.ProtocolUDP {
		return model.ProtocolUDP
	}
	app := ""
	if p.AppProtocol != nil {
		app = *p.AppProtocol
	}
	return model.ProtocolFromPort(p.Name, app)
}

// parseExportTo splits the exportTo annotation ("ns1, ns2") into its entries.
func parseExportTo(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func namespaceOf(ns string) string {
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}
