package deploy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// sharedHandler is a handler this run added to an informer it does not
// own.
type sharedHandler struct {
	inf cache.SharedIndexInformer
	reg cache.ResourceEventHandlerRegistration
}

// share adds h to inf, a shared informer started by its owner; the run
// waits for h to have seen inf's initial list, and removes h when it ends.
func (r *run) share(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		return fmt.Errorf("gateway deployment controller: handler: %w", err)
	}
	r.handlers = append(r.handlers, sharedHandler{inf, reg})
	r.synced = append(r.synced, inf.HasSynced, reg.HasSynced)
	return nil
}

// unshare removes the handlers share added.
func (r *run) unshare() {
	for _, h := range r.handlers {
		_ = h.inf.RemoveEventHandler(h.reg)
	}
}

// watchConfigMaps makes the run's ConfigMap informer: metadata only (the
// data of ConfigMaps is never listed or watched), and of that only what
// tells an object and its version apart, so its cache holds a few
// hundred bytes per ConfigMap of the cluster. A ConfigMap added, changed
// or deleted reconciles the Gateways of its namespace whose
// parametersRef names it, and a class defaults ConfigMap those of its
// class; pass reads their data then (overlays).
func (r *run) watchConfigMaps() error {
	gi := metadatainformer.NewFilteredMetadataInformer(r.opts.Metadata, corev1.SchemeGroupVersion.WithResource("configmaps"),
		metav1.NamespaceAll, 0, cache.Indexers{classDefaultsIndex: r.classOfDefaults}, nil)
	inf := gi.Informer()
	if err := inf.SetTransform(slimMetadata); err != nil {
		return fmt.Errorf("gateway deployment controller: ConfigMap transform: %w", err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			// The initial list changes nothing: every Gateway is
			// reconciled when the run starts.
			if !initial {
				r.enqueueParametersOf(obj)
				r.enqueueDefaultsOf(obj)
			}
		},
		UpdateFunc: func(o, n any) {
			om, ok1 := asMeta(o)
			nm, ok2 := asMeta(n)
			if ok1 && ok2 && om.GetResourceVersion() == nm.GetResourceVersion() {
				return
			}
			r.enqueueParametersOf(n)
			// The label may have moved to another class, or gone.
			r.enqueueDefaultsOf(o)
			r.enqueueDefaultsOf(n)
		},
		DeleteFunc: func(obj any) {
			r.enqueueParametersOf(obj)
			r.enqueueDefaultsOf(obj)
		},
	}); err != nil {
		return fmt.Errorf("gateway deployment controller: handler: %w", err)
	}
	r.configMaps = inf
	r.synced = append(r.synced, inf.HasSynced)
	return nil
}

// slimMetadata keeps, of a ConfigMap's metadata, its name, namespace,
// uid and resourceVersion (no annotations or managedFields), and of a
// class defaults ConfigMap also that label and its creation time.
func slimMetadata(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{
		TypeMeta: m.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		},
	}
	if class, ok := m.Labels[ClassDefaultsLabel]; ok {
		out.Labels = map[string]string{ClassDefaultsLabel: class}
		out.CreationTimestamp = m.CreationTimestamp
	}
	return out, nil
}

// classDefaultsIndex indexes the class defaults ConfigMaps by class.
const classDefaultsIndex = "classDefaults"

// classOfDefaults is the class whose defaults the ConfigMap obj holds
// (classDefaultsIndex): none unless it is labelled so in the system
// namespace.
func (r *run) classOfDefaults(obj any) ([]string, error) {
	m, ok := asMeta(obj)
	if !ok || m.GetNamespace() != r.opts.SystemNamespace {
		return nil, nil
	}
	if class, ok := m.GetLabels()[ClassDefaultsLabel]; ok && class != "" {
		return []string{class}, nil
	}
	return nil, nil
}

// classDefaults is the name of the class defaults ConfigMap of class: the
// oldest of the system namespace labelled for it (then by name, as
// istiod picks), "" for none.
func (r *run) classDefaults(class string) string {
	objs, _ := r.configMaps.GetIndexer().ByIndex(classDefaultsIndex, class)
	var best metav1.Object
	for _, obj := range objs {
		m, ok := asMeta(obj)
		if !ok {
			continue
		}
		if best == nil {
			best = m
			continue
		}
		t, bt := m.GetCreationTimestamp().Time, best.GetCreationTimestamp().Time
		if t.Before(bt) || t.Equal(bt) && m.GetName() < best.GetName() {
			best = m
		}
	}
	if best == nil {
		return ""
	}
	return best.GetName()
}

// enqueueDefaultsOf enqueues the Gateways of the class whose defaults the
// ConfigMap obj holds, when it is one.
func (r *run) enqueueDefaultsOf(obj any) {
	classes, _ := r.classOfDefaults(obj)
	for _, class := range classes {
		r.enqueueClassName(class)
	}
}

// enqueueParametersOf enqueues the Gateways whose parametersRef names the
// ConfigMap obj.
func (r *run) enqueueParametersOf(obj any) {
	m, ok := asMeta(obj)
	if !ok {
		return
	}
	gws, _ := r.gateways.Gateways(m.GetNamespace()).List(labels.Everything())
	for _, gw := range gws {
		if name, err := Parameters(gw); err == nil && name == m.GetName() {
			r.queue.Add(types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name})
		}
	}
}
