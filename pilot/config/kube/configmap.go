package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// configMapWatch is an informer on one ConfigMap, listed and watched by name.
type configMapWatch struct {
	factory         informers.SharedInformerFactory
	inf             cache.SharedIndexInformer
	namespace, name string
}

// newConfigMapWatch calls onEvent after each add, update or delete of
// ConfigMap namespace/name; nothing runs until start.
func newConfigMapWatch(client kubernetes.Interface, namespace, name string, onEvent func()) (*configMapWatch, error) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	w := &configMapWatch{factory: f, inf: f.Core().V1().ConfigMaps().Informer(), namespace: namespace, name: name}
	if _, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { onEvent() },
		UpdateFunc: func(_, _ any) { onEvent() },
		DeleteFunc: func(any) { onEvent() },
	}); err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", w.where(), err)
	}
	return w, nil
}

// start runs the informer until ctx ends and waits for its first list.
func (w *configMapWatch) start(ctx context.Context) error {
	w.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced) {
		return fmt.Errorf("ConfigMap %s not synced: %w", w.where(), context.Cause(ctx))
	}
	return nil
}

// wait blocks until the informer stopped (after the start context ended).
func (w *configMapWatch) wait() { w.factory.Shutdown() }

// get returns the ConfigMap, if it exists.
func (w *configMapWatch) get() (*corev1.ConfigMap, bool) {
	obj, ok, _ := w.inf.GetStore().GetByKey(w.where())
	cm, isCM := obj.(*corev1.ConfigMap)
	return cm, ok && isCM
}

func (w *configMapWatch) where() string { return w.namespace + "/" + w.name }
