// Package secrets is the source of gateway credentials: the Secrets of the
// cluster (an informer on every namespace, kube.go) and those of the
// configuration directory, kept as an immutable snapshot that every
// PushContext build takes (model.SecretSource).
package secrets

import (
	"bytes"
	"cmp"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/model"
)

// Name is a Secret's namespace and name.
type Name struct{ Namespace, Name string }

// byNamespace maps a namespace to its Secrets by name.
type byNamespace map[string]map[string]*corev1.Secret

// Source holds the credential Secrets of two origins: the cluster's
// (written by Kube) and the configuration directory's (ReplaceFiles). A
// Secret of the cluster hides one of the same namespace and name in the
// directory. Source is safe for concurrent use; the Secrets it is given must
// not be modified afterwards.
//
// Snapshots are cheap: the maps a published Snapshot reaches are never
// written again. A change copies the map of its namespace (and the index of
// namespaces) once per published snapshot, however many changes come
// between two snapshots, and leaves every other namespace's map shared.
type Source struct {
	mu          sync.Mutex
	kube, files layer
	// cms holds the ca.crt of ConfigMaps (configmaps.go), as Secrets.
	cms layer
	// published is the last snapshot handed out; nil once a change made it stale.
	published *Snapshot
}

var _ model.SecretSource = (*Source)(nil)

// NewSource returns an empty Source.
func NewSource() *Source { return &Source{} }

// Snapshot returns the current Secrets; it never changes afterwards.
func (s *Source) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.published == nil {
		s.published = &Snapshot{kube: s.kube.publish(), files: s.files.publish(), cms: s.cms.publish()}
	}
	return s.published
}

// SecretSnapshot is Snapshot as a model.SecretSource.
func (s *Source) SecretSnapshot() model.SecretSnapshot { return s.Snapshot() }

// ReplaceFiles makes secrets the configuration directory's Secrets and
// returns those added, removed, or whose type or data changed, sorted.
func (s *Source) ReplaceFiles(secrets []*corev1.Secret) []Name {
	next := byNamespace{}
	for _, sec := range secrets {
		m := next[sec.Namespace]
		if m == nil {
			m = map[string]*corev1.Secret{}
			next[sec.Namespace] = m
		}
		m[sec.Name] = sec
	}
	s.mu.Lock()
	prev := s.files.ns
	s.files = layer{ns: next, ownIndex: true}
	s.published = nil
	s.mu.Unlock()

	var changed []Name
	for ns, m := range next {
		for name, sec := range m {
			if p := prev[ns][name]; p == nil || !SameContent(p, sec) {
				changed = append(changed, Name{ns, name})
			}
		}
	}
	for ns, m := range prev {
		for name := range m {
			if next[ns][name] == nil {
				changed = append(changed, Name{ns, name})
			}
		}
	}
	slices.SortFunc(changed, func(a, b Name) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return changed
}

// setKube stores a Secret of the cluster.
func (s *Source) setKube(sec *corev1.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kube.writable(sec.Namespace)[sec.Name] = sec
	s.published = nil
}

// deleteKube forgets a Secret of the cluster.
func (s *Source) deleteKube(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kube.ns[namespace][name] == nil {
		return
	}
	m := s.kube.writable(namespace)
	delete(m, name)
	if len(m) == 0 {
		delete(s.kube.ns, namespace)
	}
	s.published = nil
}

// SameContent reports whether two Secrets carry the same type and data:
// what credentials are made of.
func SameContent(a, b *corev1.Secret) bool {
	return a.Type == b.Type && maps.EqualFunc(a.Data, b.Data, bytes.Equal)
}

// layer is one origin's Secrets, copy-on-write: ownIndex says ns is not
// reachable from a published Snapshot, own which namespaces' maps are not.
type layer struct {
	ns       byNamespace
	ownIndex bool
	own      map[string]bool
}

// writable returns the map of namespace, copied first if a Snapshot shares it.
func (l *layer) writable(namespace string) map[string]*corev1.Secret {
	if !l.ownIndex {
		next := make(byNamespace, len(l.ns)+1)
		maps.Copy(next, l.ns)
		l.ns, l.ownIndex = next, true
	}
	if !l.own[namespace] {
		m := make(map[string]*corev1.Secret, len(l.ns[namespace])+1)
		maps.Copy(m, l.ns[namespace])
		l.ns[namespace] = m
		if l.own == nil {
			l.own = map[string]bool{}
		}
		l.own[namespace] = true
	}
	return l.ns[namespace]
}

// publish hands the current maps to a Snapshot: from now on they are shared.
func (l *layer) publish() byNamespace {
	l.ownIndex = false
	clear(l.own)
	return l.ns
}

// Snapshot is an immutable set of credential Secrets (model.SecretSnapshot).
type Snapshot struct{ kube, files, cms byNamespace }

var _ model.SecretSnapshot = (*Snapshot)(nil)

// Secret returns the cluster's Secret of that namespace and name, else the
// configuration directory's; nil if neither has one.
func (s *Snapshot) Secret(namespace, name string) *corev1.Secret {
	if sec := s.kube[namespace][name]; sec != nil {
		return sec
	}
	return s.files[namespace][name]
}
