package kube

import (
	"maps"

	"google.golang.org/protobuf/proto"
	extensionsv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
)

// kindInfo describes one watched Istio kind: its CRD, its informer and how
// an object becomes a model.Config.
type kindInfo struct {
	kind model.Kind
	// crd is the CustomResourceDefinition's name (plural.group).
	crd      string
	informer func(istioinformers.SharedInformerFactory) cache.SharedIndexInformer
	convert  func(obj any) (model.Config, bool)
}

// Kinds lists the Istio kinds watched, with the CRD each needs.
func Kinds() map[model.Kind]string {
	out := map[model.Kind]string{}
	for _, k := range kinds {
		out[k.kind] = k.crd
	}
	return out
}

// kinds is every Istio kind of the chart's CRDs, in processing order.
var kinds = []kindInfo{
	{model.KindServiceEntry, "serviceentries.networking.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().ServiceEntries().Informer()
		},
		converter(model.KindServiceEntry, func(o *networkingv1.ServiceEntry) proto.Message { return &o.Spec })},
	{model.KindWorkloadEntry, "workloadentries.networking.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().WorkloadEntries().Informer()
		},
		workloadEntryConverter()},
	{model.KindVirtualService, "virtualservices.networking.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().VirtualServices().Informer()
		},
		converter(model.KindVirtualService, func(o *networkingv1.VirtualService) proto.Message { return &o.Spec })},
	{model.KindDestinationRule, "destinationrules.networking.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().DestinationRules().Informer()
		},
		converter(model.KindDestinationRule, func(o *networkingv1.DestinationRule) proto.Message { return &o.Spec })},
	{model.KindGateway, "gateways.networking.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().Gateways().Informer()
		},
		converter(model.KindGateway, func(o *networkingv1.Gateway) proto.Message { return &o.Spec })},
	{model.KindSidecar, "sidecars.networking.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().Sidecars().Informer()
		},
		converter(model.KindSidecar, func(o *networkingv1.Sidecar) proto.Message { return &o.Spec })},
	{model.KindEnvoyFilter, "envoyfilters.networking.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1alpha3().EnvoyFilters().Informer()
		},
		converter(model.KindEnvoyFilter, func(o *networkingv1alpha3.EnvoyFilter) proto.Message { return &o.Spec })},
	{file.KindPeerAuthentication, "peerauthentications.security.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Security().V1().PeerAuthentications().Informer()
		},
		converter(file.KindPeerAuthentication, func(o *securityv1.PeerAuthentication) proto.Message { return &o.Spec })},
	{file.KindAuthorizationPolicy, "authorizationpolicies.security.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Security().V1().AuthorizationPolicies().Informer()
		},
		converter(file.KindAuthorizationPolicy, func(o *securityv1.AuthorizationPolicy) proto.Message { return &o.Spec })},
	{file.KindRequestAuthentication, "requestauthentications.security.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Security().V1().RequestAuthentications().Informer()
		},
		converter(file.KindRequestAuthentication, func(o *securityv1.RequestAuthentication) proto.Message { return &o.Spec })},
	// The chart's other kinds: watched so that each object is validated
	// and its unsupported fields warned about (support.Check), as in file
	// mode, rather than ignored without a word; generators read those they
	// support.
	{file.KindProxyConfig, "proxyconfigs.networking.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1beta1().ProxyConfigs().Informer()
		},
		converter(file.KindProxyConfig, func(o *networkingv1beta1.ProxyConfig) proto.Message { return &o.Spec })},
	{file.KindWorkloadGroup, "workloadgroups.networking.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().WorkloadGroups().Informer()
		},
		converter(file.KindWorkloadGroup, func(o *networkingv1.WorkloadGroup) proto.Message { return &o.Spec })},
	{model.KindTelemetry, "telemetries.telemetry.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Telemetry().V1().Telemetries().Informer()
		},
		converter(model.KindTelemetry, func(o *telemetryv1.Telemetry) proto.Message { return &o.Spec })},
	{file.KindWasmPlugin, "wasmplugins.extensions.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Extensions().V1alpha1().WasmPlugins().Informer()
		},
		converter(file.KindWasmPlugin, func(o *extensionsv1alpha1.WasmPlugin) proto.Message { return &o.Spec })},
	{file.KindTrafficExtension, "trafficextensions.extensions.istio.io",
		func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Extensions().V1alpha1().TrafficExtensions().Informer()
		},
		converter(file.KindTrafficExtension, func(o *extensionsv1alpha1.TrafficExtension) proto.Message { return &o.Spec })},
}

// workloadEntryConverter is converter for WorkloadEntries, keeping their
// Healthy condition as the Config's Status (the one status the model
// reads: health-checked entries leave EDS while it is not True).
func workloadEntryConverter() func(any) (model.Config, bool) {
	conv := converter(model.KindWorkloadEntry, func(o *networkingv1.WorkloadEntry) proto.Message { return &o.Spec })
	return func(obj any) (model.Config, bool) {
		cfg, ok := conv(obj)
		if o, isEntry := obj.(*networkingv1.WorkloadEntry); ok && isEntry {
			cfg.Status = serviceentry.HealthStatus(&o.Status)
		}
		return cfg, ok
	}
}

// converter returns a conversion for objects of type T: metadata from the
// ObjectMeta, Spec a deep copy (informer objects are shared and read-only).
func converter[T metav1.Object](kind model.Kind, spec func(T) proto.Message) func(any) (model.Config, bool) {
	return func(obj any) (model.Config, bool) {
		o, ok := obj.(T)
		if !ok {
			return model.Config{}, false
		}
		return model.Config{
			Meta: model.Meta{
				Kind:              kind,
				Name:              o.GetName(),
				Namespace:         o.GetNamespace(),
				Labels:            maps.Clone(o.GetLabels()),
				Annotations:       maps.Clone(o.GetAnnotations()),
				ResourceVersion:   o.GetResourceVersion(),
				Generation:        o.GetGeneration(),
				CreationTimestamp: o.GetCreationTimestamp().Time,
				Source:            "kubernetes:" + string(kind) + "/" + o.GetNamespace() + "/" + o.GetName(),
			},
			Spec: proto.Clone(spec(o)),
		}, true
	}
}
