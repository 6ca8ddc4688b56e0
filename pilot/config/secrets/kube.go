package secrets

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ignoredTypes are Secret types that never hold gateway credentials and
// are not watched, as in Istio.
var ignoredTypes = []corev1.SecretType{corev1.SecretTypeServiceAccountToken, "helm.sh/release.v1"}

// Kube is an informer on the Secrets of every namespace (except
// service-account tokens and Helm releases) that writes them into a Source.
type Kube struct {
	log      *slog.Logger
	informer cache.SharedIndexInformer
	// handler is the Source's event handler; it has synced once the first
	// list is in the Source (the informer's own cache may be ahead of it).
	handler cache.ResourceEventHandlerRegistration
}

// NewKube returns an informer over client's Secrets writing into source;
// call Run to fill it. After each Secret added, deleted, or whose type or
// data changed is in source, onChange (if not nil) is called with its
// namespace and name, to push the gateways that use it. log may be nil (no
// logs).
func NewKube(client kubernetes.Interface, source *Source, onChange func(namespace, name string), log *slog.Logger) (*Kube, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if onChange == nil {
		onChange = func(string, string) {}
	}
	var sel []fields.Selector
	for _, t := range ignoredTypes {
		sel = append(sel, fields.OneTermNotEqualSelector("type", string(t)))
	}
	selector := fields.AndSelectors(sel...).String()
	inf := coreinformers.NewFilteredSecretInformer(client, metav1.NamespaceAll, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = selector })
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s, ok := obj.(*corev1.Secret); ok {
				source.setKube(s)
				onChange(s.Namespace, s.Name)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			s, ok := newObj.(*corev1.Secret)
			if !ok {
				return
			}
			source.setKube(s)
			// Labels, annotations and resyncs change no credential.
			if old, ok := oldObj.(*corev1.Secret); !ok || !SameContent(old, s) {
				onChange(s.Namespace, s.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if s, ok := obj.(*corev1.Secret); ok {
				source.deleteKube(s.Namespace, s.Name)
				onChange(s.Namespace, s.Name)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("secret informer: event handler: %w", err)
	}
	return &Kube{log: log, informer: inf, handler: reg}, nil
}

// Run watches Secrets until ctx is done.
func (k *Kube) Run(ctx context.Context) {
	k.log.Info("watching secrets for gateway credentials")
	k.informer.RunWithContext(ctx)
}

// HasSynced reports whether the first list is in the Source.
func (k *Kube) HasSynced() bool { return k.handler.HasSynced() }
