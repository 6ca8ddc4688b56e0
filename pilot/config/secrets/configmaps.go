package secrets

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// CACertKey is the ConfigMap key of a CA bundle (a BackendTLSPolicy's
// caCertificateRefs, served over SDS as configmap://NAMESPACE/NAME-cacert).
const CACertKey = "ca.crt"

// MaxCACertBytes bounds the ca.crt kept of one ConfigMap (larger ones are
// kept as empty, which no check accepts): a system CA bundle is about
// 200 KiB, and every gateway that uses it is sent it.
const MaxCACertBytes = 512 << 10

// ConfigMaps is an informer on the ConfigMaps of every namespace that keeps
// of each one only its ca.crt, in the Source (Snapshot.ConfigMapCA): the
// informer's cache holds ConfigMaps stripped of everything else, so a
// cluster's large ConfigMaps cost no memory here.
type ConfigMaps struct {
	log      *slog.Logger
	informer cache.SharedIndexInformer
	handler  cache.ResourceEventHandlerRegistration
}

// NewConfigMaps returns an informer over client's ConfigMaps writing the
// ca.crt of each into source; call Run to fill it. After a ca.crt appeared,
// changed or went is in source, onChange (if not nil) is called with the
// ConfigMap's namespace and name. log may be nil (no logs).
func NewConfigMaps(client kubernetes.Interface, source *Source, onChange func(namespace, name string), log *slog.Logger) (*ConfigMaps, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if onChange == nil {
		onChange = func(string, string) {}
	}
	inf := coreinformers.NewConfigMapInformer(client, metav1.NamespaceAll, 0, cache.Indexers{})
	if err := inf.SetTransform(stripConfigMap); err != nil {
		return nil, fmt.Errorf("configmap informer: transform: %w", err)
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Data != nil {
				source.SetConfigMapCA(cm.Namespace, cm.Name, []byte(cm.Data[CACertKey]))
				onChange(cm.Namespace, cm.Name)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			cm, ok := newObj.(*corev1.ConfigMap)
			if !ok {
				return
			}
			old, _ := oldObj.(*corev1.ConfigMap)
			if old != nil && (old.Data == nil) == (cm.Data == nil) && old.Data[CACertKey] == cm.Data[CACertKey] {
				return
			}
			if cm.Data == nil {
				source.deleteCA(cm.Namespace, cm.Name)
			} else {
				source.SetConfigMapCA(cm.Namespace, cm.Name, []byte(cm.Data[CACertKey]))
			}
			onChange(cm.Namespace, cm.Name)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Data != nil {
				source.deleteCA(cm.Namespace, cm.Name)
				onChange(cm.Namespace, cm.Name)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("configmap informer: event handler: %w", err)
	}
	return &ConfigMaps{log: log, informer: inf, handler: reg}, nil
}

// stripConfigMap keeps of a ConfigMap its namespace, name, resource version
// and ca.crt (Data nil when it has none; empty when too large).
func stripConfigMap(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	out := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name, ResourceVersion: cm.ResourceVersion}}
	if ca, ok := cm.Data[CACertKey]; ok {
		if len(ca) > MaxCACertBytes {
			ca = ""
		}
		out.Data = map[string]string{CACertKey: ca}
	}
	return out, nil
}

// Run watches ConfigMaps until ctx is done.
func (k *ConfigMaps) Run(ctx context.Context) {
	k.log.Info("watching configmaps for CA certificates (ca.crt)")
	k.informer.RunWithContext(ctx)
}

// HasSynced reports whether the first list is in the Source.
func (k *ConfigMaps) HasSynced() bool { return k.handler.HasSynced() }

// SetConfigMapCA stores the ca.crt of a ConfigMap, as the ConfigMap
// informer does (kept as the data of a Secret of the Source's ConfigMap
// layer; a snapshot's ConfigMapCA reads it).
func (s *Source) SetConfigMapCA(namespace, name string, ca []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.cms.ns[namespace][name]; cur != nil && bytes.Equal(cur.Data[CACertKey], ca) {
		return
	}
	s.cms.writable(namespace)[name] = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Data:       map[string][]byte{CACertKey: ca},
	}
	s.published = nil
}

// deleteCA forgets the ca.crt of a ConfigMap.
func (s *Source) deleteCA(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cms.ns[namespace][name] == nil {
		return
	}
	m := s.cms.writable(namespace)
	delete(m, name)
	if len(m) == 0 {
		delete(s.cms.ns, namespace)
	}
	s.published = nil
}

// ConfigMapCA returns the ca.crt of ConfigMap namespace/name and whether
// that ConfigMap exists with a ca.crt key (its value may be empty).
func (s *Snapshot) ConfigMapCA(namespace, name string) ([]byte, bool) {
	sec := s.cms[namespace][name]
	if sec == nil {
		return nil, false
	}
	return sec.Data[CACertKey], true
}
