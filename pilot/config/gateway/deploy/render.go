package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Labels, annotations and names istiod's deployment controller uses.
const (
	// ControllerName is the controllerName of the GatewayClasses whose
	// Gateways are deployed (pilot/config/gateway.ControllerName; not
	// imported, so that package may use Name).
	ControllerName gwv1.GatewayController = "istio.io/gateway-controller"
	// FieldManager is the server-side apply field manager.
	FieldManager = "istio.io/gateway-controller"
	// ManagedLabel marks the objects this controller owns; an existing
	// object without it is never taken over.
	ManagedLabel = "gateway.istio.io/managed"
	// ManagedValue is ManagedLabel's value (the controller name with "/"
	// replaced by "-").
	ManagedValue = "istio.io-gateway-controller"
	// GatewayNameLabel selects the Gateway's pods (the translated Istio
	// Gateways select them by it too).
	GatewayNameLabel = "gateway.networking.k8s.io/gateway-name"
	// IstioGatewayNameLabel is istiod's older pod label, kept for
	// selectors written against it.
	IstioGatewayNameLabel = "istio.io/gateway-name"
	// GatewayClassLabel names the Gateway's class.
	GatewayClassLabel = "gateway.networking.k8s.io/gateway-class-name"
	// ServiceTypeAnnotation on a Gateway sets its Service's type
	// (LoadBalancer by default).
	ServiceTypeAnnotation = "networking.istio.io/service-type"
	// NameOverrideAnnotation replaces the objects' default name NAME-CLASS.
	NameOverrideAnnotation = "gateway.istio.io/name-override"
	// ServiceAccountAnnotation replaces the ServiceAccount's name.
	ServiceAccountAnnotation = "gateway.istio.io/service-account"
	// ControllerVersionAnnotation is set by istiod on the Gateway; it is
	// not copied onto the objects.
	ControllerVersionAnnotation = "gateway.istio.io/controller-version"
	// StatusPort is the proxy's readiness port, always on the Service.
	StatusPort = 15021

	injectLabel         = "sidecar.istio.io/inject"
	templatesAnnotation = "inject.istio.io/templates"
	lastApplied         = "kubectl.kubernetes.io/last-applied-configuration"
	gatewayAPIPrefix    = "gateway.networking.k8s.io/"
)

// Objects are what one Gateway needs, as server-side apply configurations.
type Objects struct {
	ServiceAccount *corev1ac.ServiceAccountApplyConfiguration
	Deployment     *appsv1ac.DeploymentApplyConfiguration
	Service        *corev1ac.ServiceApplyConfiguration
	// HPA and PDB are nil unless the parameters ask for them.
	HPA *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration
	PDB *policyv1ac.PodDisruptionBudgetApplyConfiguration
}

// Managed reports whether gw is deployed by this controller, as istiod
// decides: no address, or one IP address (the Service's loadBalancerIP).
// A hostname, or several addresses, name an existing deployment: manual
// deployment, nothing is created.
func Managed(gw *gwv1.Gateway) bool {
	switch len(gw.Spec.Addresses) {
	case 0:
		return true
	case 1:
		t := gw.Spec.Addresses[0].Type
		return t == nil || *t == gwv1.IPAddressType
	default:
		return false
	}
}

// Name is the name of gw's Deployment and Service: the
// gateway.istio.io/name-override annotation, else NAME-CLASS as istiod
// names them. When NAME-CLASS is not a valid Service name (longer than 63
// characters, dots, a leading digit) it is made one: dots become dashes, a
// leading digit gets the prefix "gw-", and a name too long is cut and ends
// with a hash of NAME-CLASS, so it stays unique.
func Name(gw *gwv1.Gateway) string {
	if o := gw.Annotations[NameOverrideAnnotation]; o != "" {
		return o
	}
	return dns1035(gw.Name + "-" + string(gw.Spec.GatewayClassName))
}

// ServiceAccountName is the name of gw's ServiceAccount: the
// gateway.istio.io/service-account annotation, else Name.
func ServiceAccountName(gw *gwv1.Gateway) string {
	if o := gw.Annotations[ServiceAccountAnnotation]; o != "" {
		return o
	}
	return Name(gw)
}

func dns1035(s string) string {
	if len(validation.IsDNS1035Label(s)) == 0 {
		return s
	}
	orig := s
	s = strings.ToLower(strings.ReplaceAll(s, ".", "-"))
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		s = "gw-" + s
	}
	if len(s) > validation.DNS1035LabelMaxLength {
		sum := sha256.Sum256([]byte(orig))
		s = strings.TrimRight(s[:validation.DNS1035LabelMaxLength-9], "-") + "-" + hex.EncodeToString(sum[:4])
	}
	return strings.TrimRight(s, "-")
}

// Render returns the objects gw needs, patched with each overlay in turn
// (the class defaults, then the ConfigMap Parameters names, as istiod
// layers them), or an error saying why they cannot be made (an invalid
// name, service type, override or parameters). It does not check the
// class or Managed.
func Render(gw *gwv1.Gateway, overlays ...Overlay) (*Objects, error) {
	var errs []error
	if msgs := validation.IsValidLabelValue(gw.Name); len(msgs) > 0 {
		// The pods are selected by a label holding the Gateway's name.
		errs = append(errs, fmt.Errorf("gateway name %q cannot be a label value: %s", gw.Name, strings.Join(msgs, "; ")))
	}
	name, sa := Name(gw), ServiceAccountName(gw)
	if msgs := validation.IsDNS1035Label(name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("name %q (%s) is not a valid Service name: %s", name, NameOverrideAnnotation, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Subdomain(sa); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("service account %q (%s) is not valid: %s", sa, ServiceAccountAnnotation, strings.Join(msgs, "; ")))
	}
	svcType := corev1.ServiceTypeLoadBalancer
	if t, ok := gw.Annotations[ServiceTypeAnnotation]; ok {
		svcType = corev1.ServiceType(t)
		switch svcType {
		case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		default:
			errs = append(errs, fmt.Errorf("%s %q: want ClusterIP, NodePort or LoadBalancer", ServiceTypeAnnotation, t))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	class := string(gw.Spec.GatewayClassName)
	infraLabels, infraAnnotations := infrastructure(gw)
	labels := merge(infraLabels, map[string]string{
		GatewayNameLabel: gw.Name, IstioGatewayNameLabel: gw.Name, ManagedLabel: ManagedValue,
	})
	if len(validation.IsValidLabelValue(class)) == 0 {
		labels[GatewayClassLabel] = class
	}
	owner := metav1ac.OwnerReference().
		WithAPIVersion(gwv1.GroupVersion.String()).WithKind("Gateway").WithName(gw.Name).WithUID(gw.UID)

	out := &Objects{}
	out.ServiceAccount = corev1ac.ServiceAccount(sa, gw.Namespace).
		WithLabels(labels).WithAnnotations(infraAnnotations).WithOwnerReferences(owner)

	podLabels := merge(map[string]string{
		injectLabel:                           "true",
		"service.istio.io/canonical-name":     name,
		"service.istio.io/canonical-revision": "latest",
	}, labels)
	podAnnotations := merge(infraAnnotations, map[string]string{
		templatesAnnotation:    "gateway",
		"prometheus.io/path":   "/stats/prometheus",
		"prometheus.io/port":   "15020",
		"prometheus.io/scrape": "true",
	})
	out.Deployment = appsv1ac.Deployment(name, gw.Namespace).
		WithLabels(labels).WithAnnotations(infraAnnotations).WithOwnerReferences(owner).
		WithSpec(appsv1ac.DeploymentSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{GatewayNameLabel: gw.Name})).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(podLabels).WithAnnotations(podAnnotations).
				WithSpec(corev1ac.PodSpec().
					WithServiceAccountName(sa).
					// Binding 80 and 443 without privileges, as istiod's
					// template does.
					WithSecurityContext(corev1ac.PodSecurityContext().WithSysctls(
						corev1ac.Sysctl().WithName("net.ipv4.ip_unprivileged_port_start").WithValue("0"))).
					// The injector's gateway template fills in the proxy.
					WithContainers(corev1ac.Container().WithName("istio-proxy").WithImage("auto")))))

	spec := corev1ac.ServiceSpec().
		WithType(svcType).
		WithIPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack).
		WithSelector(map[string]string{GatewayNameLabel: gw.Name}).
		WithPorts(ServicePorts(gw)...)
	if len(gw.Spec.Addresses) > 0 && svcType == corev1.ServiceTypeLoadBalancer {
		spec.WithLoadBalancerIP(gw.Spec.Addresses[0].Value)
	}
	out.Service = corev1ac.Service(name, gw.Namespace).
		WithLabels(labels).WithAnnotations(infraAnnotations).WithOwnerReferences(owner).WithSpec(spec)
	for _, ov := range overlays {
		if err := out.overlay(gw, owner, ov.Data); err != nil {
			if ov.Source != "" {
				return nil, fmt.Errorf("%s: %w", ov.Source, err)
			}
			return nil, err
		}
	}
	return out, nil
}

// ServicePorts are the status port, then one port per distinct listener
// port, named after the first listener using it (dots become dashes, cut to
// 63 characters; a name already taken becomes PROTOCOL-INDEX), with the
// listener's protocol as appProtocol.
func ServicePorts(gw *gwv1.Gateway) []*corev1ac.ServicePortApplyConfiguration {
	out := []*corev1ac.ServicePortApplyConfiguration{
		corev1ac.ServicePort().WithName("status-port").WithPort(StatusPort).WithProtocol(corev1.ProtocolTCP).WithAppProtocol("tcp"),
	}
	ports := map[int32]bool{StatusPort: true}
	names := map[string]bool{"status-port": true}
	for i, l := range gw.Spec.Listeners {
		if ports[int32(l.Port)] {
			continue
		}
		ports[int32(l.Port)] = true
		proto := strings.ToLower(string(l.Protocol))
		name := portName(string(l.Name))
		if name == "" || names[name] {
			name = portName(fmt.Sprintf("%s-%d", proto, i))
		}
		names[name] = true
		p := corev1ac.ServicePort().WithName(name).WithPort(int32(l.Port)).WithProtocol(corev1.ProtocolTCP)
		if len(validation.IsQualifiedName(proto)) == 0 {
			p.WithAppProtocol(proto)
		}
		out = append(out, p)
	}
	return out
}

func portName(s string) string {
	s = strings.ToLower(strings.ReplaceAll(s, ".", "-"))
	if len(s) > validation.DNS1123LabelMaxLength {
		s = s[:validation.DNS1123LabelMaxLength]
	}
	s = strings.Trim(s, "-")
	if len(validation.IsDNS1123Label(s)) > 0 {
		return ""
	}
	return s
}

// infrastructure is what istiod copies onto the objects: the labels and
// annotations of spec.infrastructure when set, else the Gateway's own
// (istiod's default), without keys under gateway.networking.k8s.io/ and
// the annotations meant for the controller.
func infrastructure(gw *gwv1.Gateway) (labels, annotations map[string]string) {
	labels, annotations = maps.Clone(gw.Labels), maps.Clone(gw.Annotations)
	if inf := gw.Spec.Infrastructure; inf != nil {
		if inf.Labels != nil {
			labels = map[string]string{}
			for k, v := range inf.Labels {
				labels[string(k)] = string(v)
			}
		}
		if inf.Annotations != nil {
			annotations = map[string]string{}
			for k, v := range inf.Annotations {
				annotations[string(k)] = string(v)
			}
		}
	}
	for _, m := range []map[string]string{labels, annotations} {
		for k := range m {
			if strings.HasPrefix(k, gatewayAPIPrefix) {
				delete(m, k)
			}
		}
	}
	for _, k := range []string{lastApplied, NameOverrideAnnotation, ServiceAccountAnnotation, ControllerVersionAnnotation} {
		delete(annotations, k)
	}
	if labels == nil {
		labels = map[string]string{}
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	return labels, annotations
}

// merge returns a new map with the entries of ms, later ones winning.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}
