package secret

import (
	"bytes"
	"cmp"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Store is a SecretLister over a set of Secrets replaced as a whole, as the
// Secrets of a watched configuration directory (file mode). It is safe for
// concurrent use; the Secrets given to Replace must not be modified later.
type Store struct {
	mu      sync.RWMutex
	secrets map[Name]*corev1.Secret
}

var _ SecretLister = (*Store)(nil)

// Name is a Secret's namespace and name.
type Name struct{ Namespace, Name string }

// NewStore returns an empty Store.
func NewStore() *Store { return &Store{secrets: map[Name]*corev1.Secret{}} }

// Secret returns the Secret of that namespace and name; nil if none.
func (s *Store) Secret(namespace, name string) (*corev1.Secret, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.secrets[Name{namespace, name}], nil
}

// Replace makes secrets the content of the store and returns the Secrets
// added, removed or whose type or data changed, sorted.
func (s *Store) Replace(secrets []*corev1.Secret) []Name {
	next := make(map[Name]*corev1.Secret, len(secrets))
	for _, sec := range secrets {
		next[Name{sec.Namespace, sec.Name}] = sec
	}
	s.mu.Lock()
	prev := s.secrets
	s.secrets = next
	s.mu.Unlock()
	var changed []Name
	for k, n := range next {
		if p := prev[k]; p == nil || !sameContent(p, n) {
			changed = append(changed, k)
		}
	}
	for k := range prev {
		if next[k] == nil {
			changed = append(changed, k)
		}
	}
	slices.SortFunc(changed, func(a, b Name) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return changed
}

func sameContent(a, b *corev1.Secret) bool {
	return a.Type == b.Type && maps.EqualFunc(a.Data, b.Data, bytes.Equal)
}

// Chain is a SecretLister trying each lister in order (Kubernetes, then
// files) and returning the first Secret found.
type Chain []SecretLister

// Secret returns the first lister's Secret of that namespace and name.
func (c Chain) Secret(namespace, name string) (*corev1.Secret, error) {
	var firstErr error
	for _, l := range c {
		sec, err := l.Secret(namespace, name)
		switch {
		case err == nil && sec != nil:
			return sec, nil
		case err != nil && !apierrors.IsNotFound(err) && firstErr == nil:
			firstErr = err
		}
	}
	return nil, firstErr
}
