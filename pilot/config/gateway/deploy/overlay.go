package deploy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// Keys of a parametersRef ConfigMap, as istiod reads them: each holds a
// strategic merge patch (YAML) of one object. The HorizontalPodAutoscaler
// and the PodDisruptionBudget exist only when their key is present.
const (
	OverlayDeployment     = "deployment"
	OverlayService        = "service"
	OverlayServiceAccount = "serviceAccount"
	OverlayHPA            = "horizontalPodAutoscaler"
	OverlayPDB            = "podDisruptionBudget"
)

var overlayKeys = []string{OverlayDeployment, OverlayHPA, OverlayPDB, OverlayService, OverlayServiceAccount}

// ClassDefaultsLabel marks a ConfigMap of the control plane's namespace
// whose keys (those of a parametersRef ConfigMap) apply to every Gateway
// of the class it names, under the Gateway's own parametersRef, as in
// istiod.
const ClassDefaultsLabel = "gateway.istio.io/defaults-for-class"

// Overlay is the data of one ConfigMap of patches (class defaults or a
// parametersRef); Source names it in errors.
type Overlay struct {
	Source string
	Data   map[string]string
}

// Parameters returns the name of the ConfigMap gw's
// spec.infrastructure.parametersRef names (in gw's namespace), "" when
// there is none, or an error for another kind.
func Parameters(gw *gwv1.Gateway) (string, error) {
	inf := gw.Spec.Infrastructure
	if inf == nil || inf.ParametersRef == nil {
		return "", nil
	}
	ref := inf.ParametersRef
	if ref.Group != "" || ref.Kind != "ConfigMap" {
		return "", fmt.Errorf("infrastructure.parametersRef %s/%s %s: only ConfigMaps are supported", ref.Group, ref.Kind, ref.Name)
	}
	return ref.Name, nil
}

// overlay adds the HorizontalPodAutoscaler and PodDisruptionBudget asked
// for (unless an earlier overlay did) and patches each object with its key
// of params.
func (o *Objects) overlay(gw *gwv1.Gateway, owner *metav1ac.OwnerReferenceApplyConfiguration, params map[string]string) error {
	for k := range params {
		if !slices.Contains(overlayKeys, k) {
			return fmt.Errorf("parameters key %q: want one of %s", k, strings.Join(overlayKeys, ", "))
		}
	}
	meta := o.Service.ObjectMetaApplyConfiguration
	name := *o.Deployment.Name
	if _, ok := params[OverlayHPA]; ok && o.HPA == nil {
		o.HPA = autoscalingv2ac.HorizontalPodAutoscaler(name, gw.Namespace).
			WithLabels(meta.Labels).WithAnnotations(meta.Annotations).WithOwnerReferences(owner).
			WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().
				WithScaleTargetRef(autoscalingv2ac.CrossVersionObjectReference().
					WithAPIVersion("apps/v1").WithKind("Deployment").WithName(name)).
				WithMaxReplicas(1))
	}
	if _, ok := params[OverlayPDB]; ok && o.PDB == nil {
		o.PDB = policyv1ac.PodDisruptionBudget(name, gw.Namespace).
			WithLabels(meta.Labels).WithAnnotations(meta.Annotations).WithOwnerReferences(owner).
			WithSpec(policyv1ac.PodDisruptionBudgetSpec().
				WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{GatewayNameLabel: gw.Name})))
	}
	for _, p := range []struct {
		key    string
		obj    any
		schema any
		meta   func() *metav1ac.ObjectMetaApplyConfiguration
	}{
		{OverlayServiceAccount, &o.ServiceAccount, corev1.ServiceAccount{}, func() *metav1ac.ObjectMetaApplyConfiguration { return o.ServiceAccount.ObjectMetaApplyConfiguration }},
		{OverlayDeployment, &o.Deployment, appsv1.Deployment{}, func() *metav1ac.ObjectMetaApplyConfiguration { return o.Deployment.ObjectMetaApplyConfiguration }},
		{OverlayService, &o.Service, corev1.Service{}, func() *metav1ac.ObjectMetaApplyConfiguration { return o.Service.ObjectMetaApplyConfiguration }},
		{OverlayHPA, &o.HPA, autoscalingv2.HorizontalPodAutoscaler{}, func() *metav1ac.ObjectMetaApplyConfiguration { return o.HPA.ObjectMetaApplyConfiguration }},
		{OverlayPDB, &o.PDB, policyv1.PodDisruptionBudget{}, func() *metav1ac.ObjectMetaApplyConfiguration { return o.PDB.ObjectMetaApplyConfiguration }},
	} {
		patch, ok := params[p.key]
		if !ok {
			continue
		}
		before := *p.meta()
		if err := strategicMerge(p.obj, patch, p.schema); err != nil {
			return fmt.Errorf("parameters key %s: %w", p.key, err)
		}
		after := p.meta()
		if after == nil || !sameName(before, *after) {
			return fmt.Errorf("parameters key %s: changes the name, namespace or owner references", p.key)
		}
		// The caches follow the objects by this label.
		after.WithLabels(map[string]string{ManagedLabel: ManagedValue})
	}
	return nil
}

func sameName(a, b metav1ac.ObjectMetaApplyConfiguration) bool {
	return reflect.DeepEqual(a.Name, b.Name) && reflect.DeepEqual(a.Namespace, b.Namespace) &&
		reflect.DeepEqual(a.OwnerReferences, b.OwnerReferences) && b.GenerateName == nil &&
		b.UID == nil && b.ResourceVersion == nil && len(b.Finalizers) == 0
}

// strategicMerge patches *ptr (a pointer to an apply configuration
// pointer) with patchYAML, as a strategic merge patch of schema's type.
func strategicMerge(ptr any, patchYAML string, schema any) error {
	original, err := json.Marshal(reflect.ValueOf(ptr).Elem().Interface())
	if err != nil {
		return err
	}
	patch, err := yaml.YAMLToJSON([]byte(patchYAML))
	if err != nil {
		return err
	}
	merged, err := strategicpatch.StrategicMergePatch(original, patch, schema)
	if err != nil {
		return err
	}
	fresh := reflect.New(reflect.TypeOf(ptr).Elem().Elem())
	if err := json.Unmarshal(merged, fresh.Interface()); err != nil {
		return err
	}
	reflect.ValueOf(ptr).Elem().Set(fresh)
	return nil
}
