package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// FieldManager names pilot-load's server-side applies.
const FieldManager = "pilot-load"

// resources maps the kinds the generator writes to their API resources.
var resources = map[string]schema.GroupVersionResource{
	"Namespace":       {Version: "v1", Resource: "namespaces"},
	"Service":         {Version: "v1", Resource: "services"},
	"EndpointSlice":   {Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
	"ServiceEntry":    {Group: "networking.istio.io", Version: "v1", Resource: "serviceentries"},
	"VirtualService":  {Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"},
	"DestinationRule": {Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"},
	"Sidecar":         {Group: "networking.istio.io", Version: "v1", Resource: "sidecars"},
	"WorkloadEntry":   {Group: "networking.istio.io", Version: "v1", Resource: "workloadentries"},
	"Pod":             {Version: "v1", Resource: "pods"},
}

// Resource returns the API resource of kind.
func Resource(kind string) (schema.GroupVersionResource, error) {
	gvr, ok := resources[kind]
	if !ok {
		return schema.GroupVersionResource{}, fmt.Errorf("kind %q: not one the generator writes", kind)
	}
	return gvr, nil
}

// Unstructured returns the object in the form the dynamic client sends.
// ClusterIPs are dropped: the API server allocates them from its own
// service range, which a generated address may fall outside of.
func (o Object) Unstructured() (*unstructured.Unstructured, error) {
	b, err := o.JSON()
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
	}
	u := &unstructured.Unstructured{Object: m}
	delete(u.Object, "status")
	if o.Kind == "Service" {
		unstructured.RemoveNestedField(u.Object, "spec", "clusterIP")
		unstructured.RemoveNestedField(u.Object, "spec", "clusterIPs")
	}
	return u, nil
}

// NewDynamicClient returns a dynamic client for the kubeconfig file (the
// default loading rules when empty: $KUBECONFIG, ~/.kube/config).
func NewDynamicClient(kubeconfig string) (dynamic.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %q: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %q: %w", kubeconfig, err)
	}
	return c, nil
}

// Apply server-side-applies objs in order (namespaces come first in
// Generate's output), taking ownership of conflicting fields. log (may be
// nil) gets progress every 500 objects.
func Apply(ctx context.Context, c dynamic.Interface, objs []Object, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for n, o := range objs {
		gvr, err := Resource(o.Kind)
		if err != nil {
			return err
		}
		u, err := o.Unstructured()
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = c.Resource(gvr)
		if o.Namespace != "" {
			ri = c.Resource(gvr).Namespace(o.Namespace)
		}
		if _, err := ri.Apply(ctx, o.Name, u, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
		}
		if o.Kind == "Pod" {
			// A Pod's IP and readiness are status, which only the status
			// subresource takes (the kubelet's part).
			if err := applyStatus(ctx, ri, o); err != nil {
				return err
			}
		}
		if (n+1)%500 == 0 {
			log.Info("applied", "objects", n+1, "of", len(objs))
		}
	}
	return nil
}

// Delete removes objs, ignoring those already gone.
func Delete(ctx context.Context, c dynamic.Interface, objs []Object) error {
	for _, o := range objs {
		gvr, err := Resource(o.Kind)
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = c.Resource(gvr)
		if o.Namespace != "" {
			ri = c.Resource(gvr).Namespace(o.Namespace)
		}
		if err := ri.Delete(ctx, o.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
		}
	}
	return nil
}

// applyStatus server-side-applies o's status through the status subresource.
func applyStatus(ctx context.Context, ri dynamic.ResourceInterface, o Object) error {
	b, err := o.JSON()
	if err != nil {
		return err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": m["apiVersion"], "kind": m["kind"],
		"metadata": map[string]any{"name": o.Name, "namespace": o.Namespace},
		"status":   m["status"],
	}}
	if _, err := ri.ApplyStatus(ctx, o.Name, u, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("apply %s %s/%s status: %w", o.Kind, o.Namespace, o.Name, err)
	}
	return nil
}
