package secret

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// ignoredTypes are Secret types that never hold gateway credentials and
// are not watched, as in Istio.
var ignoredTypes = []corev1.SecretType{corev1.SecretTypeServiceAccountToken, "helm.sh/release.v1"}

// KubeSecrets is a SecretLister backed by an informer on the Secrets of
// every namespace (except service-account tokens and Helm releases).
type KubeSecrets struct {
	log      *slog.Logger
	informer cache.SharedIndexInformer
	lister   corelisters.SecretLister
}

var _ SecretLister = (*KubeSecrets)(nil)

// NewKubeSecrets returns a lister over client's Secrets; call Run to fill
// it. log may be nil (no logs).
func NewKubeSecrets(client kubernetes.Interface, log *slog.Logger) *KubeSecrets {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var sel []fields.Selector
	for _, t := range ignoredTypes {
		sel = append(sel, fields.OneTermNotEqualSelector("type", string(t)))
	}
	selector := fields.AndSelectors(sel...).String()
	inf := coreinformers.NewFilteredSecretInformer(client, metav1.NamespaceAll, 0, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
	}, func(o *metav1.ListOptions) { o.FieldSelector = selector })
	return &KubeSecrets{log: log, informer: inf, lister: corelisters.NewSecretLister(inf.GetIndexer())}
}

// OnChange calls f with the namespace and name of every Secret added,
// changed or deleted (to push the gateways that use it). Call it before Run.
func (k *KubeSecrets) OnChange(f func(namespace, name string)) error {
	call := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if s, ok := obj.(*corev1.Secret); ok {
			f(s.Namespace, s.Name)
		}
	}
	_, err := k.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, n any) { call(n) },
		DeleteFunc: call,
	})
	if err != nil {
		return fmt.Errorf("secret informer: event handler: %w", err)
	}
	return nil
}

// Run watches Secrets until ctx is done.
func (k *KubeSecrets) Run(ctx context.Context) {
	k.log.Info("watching secrets for gateway credentials")
	k.informer.RunWithContext(ctx)
}

// HasSynced reports whether the first list has been loaded.
func (k *KubeSecrets) HasSynced() bool { return k.informer.HasSynced() }

// Secret returns the Secret from the informer's cache.
func (k *KubeSecrets) Secret(namespace, name string) (*corev1.Secret, error) {
	return k.lister.Secrets(namespace).Get(name)
}
