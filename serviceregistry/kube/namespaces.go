package kube

import (
	"fmt"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// NamespaceFilter decides which namespaces the control plane watches:
// MeshConfig discoverySelectors (label selectors on namespaces, ORed) pick
// them; no selector picks every namespace. It learns namespace labels from
// the namespace informer (OnNamespace) and tells subscribers when the
// selected set may have changed. It is safe for concurrent use.
type NamespaceFilter struct {
	mu        sync.RWMutex
	selectors []labels.Selector
	labels    map[string]map[string]string
	subs      []func()
	labelSubs []func()
}

// NewNamespaceFilter returns a filter that selects every namespace.
func NewNamespaceFilter() *NamespaceFilter {
	return &NamespaceFilter{labels: map[string]map[string]string{}}
}

// SetSelectors replaces the discovery selectors. An error names the
// selector that does not parse; the previous selectors are kept then.
func (f *NamespaceFilter) SetSelectors(sels []*metav1.LabelSelector) error {
	parsed := make([]labels.Selector, 0, len(sels))
	for i, s := range sels {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			return fmt.Errorf("meshConfig discoverySelectors[%d]: %w", i, err)
		}
		parsed = append(parsed, sel)
	}
	f.mu.Lock()
	same := len(parsed) == len(f.selectors)
	for i := range parsed {
		if same && parsed[i].String() != f.selectors[i].String() {
			same = false
		}
	}
	f.selectors = parsed
	subs := f.subs
	f.mu.Unlock()
	if !same {
		notify(subs)
	}
	return nil
}

// Selected reports whether objects in namespace ns are watched.
func (f *NamespaceFilter) Selected(ns string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.selectedLocked(ns)
}

func (f *NamespaceFilter) selectedLocked(ns string) bool {
	if len(f.selectors) == 0 {
		return true
	}
	l, ok := f.labels[ns]
	if !ok {
		return false
	}
	set := labels.Set(l)
	for _, s := range f.selectors {
		if s.Matches(set) {
			return true
		}
	}
	return false
}

// Subscribe registers fn, called (from the caller of SetSelectors or
// OnNamespace) whenever the selected set may have changed.
func (f *NamespaceFilter) Subscribe(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, fn)
}

// Labels returns the labels of namespace name as last seen (nil if
// unknown); the caller must not modify them.
func (f *NamespaceFilter) Labels(name string) map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.labels[name]
}

// SubscribeLabels registers fn, called (from the caller of OnNamespace)
// whenever a namespace's labels changed, or it came or went.
func (f *NamespaceFilter) SubscribeLabels(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.labelSubs = append(f.labelSubs, fn)
}

// OnNamespace records a namespace's labels (ns nil with deleted name to
// remove it) and notifies subscribers when its selection changed, and
// label subscribers when its labels did.
func (f *NamespaceFilter) OnNamespace(name string, ns *corev1.Namespace) {
	f.mu.Lock()
	before := f.selectedLocked(name)
	old, known := f.labels[name]
	if ns == nil {
		delete(f.labels, name)
	} else {
		f.labels[name] = maps.Clone(ns.Labels)
		if f.labels[name] == nil {
			f.labels[name] = map[string]string{}
		}
	}
	after := f.selectedLocked(name)
	cur, present := f.labels[name]
	subs, labelSubs := f.subs, f.labelSubs
	f.mu.Unlock()
	if before != after {
		notify(subs)
	}
	if known != present || !maps.Equal(old, cur) {
		notify(labelSubs)
	}
}

func notify(subs []func()) {
	for _, fn := range subs {
		fn()
	}
}
