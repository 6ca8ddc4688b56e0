package multicluster

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/serviceregistry/kube"
)

// selectors holds the mesh's discoverySelectors and the namespace filter
// of every live remote controller, so that a change reaches them all and
// a controller started later begins with the current ones. As istiod
// does, each remote cluster's namespaces are matched by their own labels.
type selectors struct {
	mu      sync.Mutex
	current []*metav1.LabelSelector
	filters map[*kube.NamespaceFilter]struct{}
}

// newFilter returns a filter with the current selectors, kept up to date
// until forget.
func (s *selectors) newFilter() *kube.NamespaceFilter {
	f := kube.NewNamespaceFilter()
	s.mu.Lock()
	defer s.mu.Unlock()
	// The selectors parsed when they were set: no error here.
	_ = f.SetSelectors(s.current)
	if s.filters == nil {
		s.filters = map[*kube.NamespaceFilter]struct{}{}
	}
	s.filters[f] = struct{}{}
	return f
}

// forget stops updating f (its controller ended).
func (s *selectors) forget(f *kube.NamespaceFilter) {
	s.mu.Lock()
	delete(s.filters, f)
	s.mu.Unlock()
}

// SetDiscoverySelectors applies the mesh's discoverySelectors (ORed label
// selectors on namespaces; none selects all) to every remote cluster, as
// kube.NamespaceFilter.SetSelectors does for the local one; the remote
// controllers re-evaluate their objects when their selection changes. An
// error names the selector that does not parse; nothing changes then.
func (c *Controller) SetDiscoverySelectors(sels []*metav1.LabelSelector) error {
	if err := kube.NewNamespaceFilter().SetSelectors(sels); err != nil {
		return err
	}
	s := &c.selectors
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current = sels
	for f := range s.filters {
		_ = f.SetSelectors(sels)
	}
	return nil
}
