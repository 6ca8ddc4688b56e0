package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs applies every CustomResourceDefinition of the multi-document
// YAML file at path (server-side apply) and waits until each is Established.
func InstallCRDs(ctx context.Context, cfg *rest.Config, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("CRDs: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("CRDs: %w", err)
	}
	crds := dyn.Resource(crdResource)
	var names []string
	for i, doc := range bytes.Split(raw, []byte("\n---")) {
		m := map[string]any{}
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return fmt.Errorf("CRDs %s: document %d: %w", path, i, err)
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if _, err := crds.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "kubetest", Force: true}); err != nil {
			return fmt.Errorf("CRD %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	for _, name := range names {
		if err := waitEstablished(ctx, crds, name); err != nil {
			return err
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, crds dynamic.NamespaceableResourceInterface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		u, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s: not established: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
