package inject

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Labels and annotations that decide injection.
const (
	namespaceInjectionLabel = "istio-injection"
	revisionLabel           = "istio.io/rev"
	injectLabel             = "sidecar.istio.io/inject"
)

// ignoredNamespace reports the system namespaces Istio never injects,
// whatever their labels.
func ignoredNamespace(ns string) bool {
	switch ns {
	case "kube-system", "kube-public", "kube-node-lease", "local-path-storage":
		return true
	}
	return false
}

// ShouldInject decides, as Istio does, whether the injector for revision
// ("" or "default" is the default revision) injects pod in namespace ns.
// It combines what Istio's MutatingWebhookConfiguration selects (namespace
// label istio-injection or istio.io/rev, pod label sidecar.istio.io/inject or
// istio.io/rev) with the injector's own check (hostNetwork, system
// namespaces, pod label/annotation sidecar.istio.io/inject, never/always
// selectors, policy). ns may be nil (no labels).
func (c *Config) ShouldInject(revision string, ns *corev1.Namespace, pod *corev1.Pod) bool {
	var nsLabels map[string]string
	if ns != nil {
		nsLabels = ns.Labels
	}
	if !webhookSelects(revision, nsLabels, pod.Labels) {
		return false
	}
	namespace := pod.Namespace
	if namespace == "" && ns != nil {
		namespace = ns.Name
	}
	return c.injectRequired(namespace, pod)
}

// webhookSelects mirrors the four webhooks of Istio's
// istio-sidecar-injector MutatingWebhookConfiguration for one revision.
func webhookSelects(revision string, nsLabels, podLabels map[string]string) bool {
	rev := revision
	if rev == "" {
		rev = "default"
	}
	nsInjection, nsHasInjection := nsLabels[namespaceInjectionLabel]
	nsRev, nsHasRev := nsLabels[revisionLabel]
	podInject, podHasInject := podLabels[injectLabel]
	podRev, podHasRev := podLabels[revisionLabel]
	notOptedOut := !podHasInject || podInject != "false"

	// rev.namespace: namespace istio.io/rev=<rev> without istio-injection.
	if nsHasRev && nsRev == rev && !nsHasInjection && notOptedOut {
		return true
	}
	// rev.object: unlabeled namespace, pod istio.io/rev=<rev>.
	if !nsHasRev && !nsHasInjection && notOptedOut && podHasRev && podRev == rev {
		return true
	}
	if rev != "default" {
		return false
	}
	// namespace: istio-injection=enabled.
	if nsHasInjection && nsInjection == "enabled" && notOptedOut {
		return true
	}
	// object: unlabeled namespace, pod sidecar.istio.io/inject=true, no istio.io/rev.
	return !nsHasInjection && !nsHasRev && podHasInject && podInject == "true" && !podHasRev
}

// injectRequired is the injector's own check once a webhook selected pod.
func (c *Config) injectRequired(namespace string, pod *corev1.Pod) bool {
	if pod.Spec.HostNetwork || ignoredNamespace(namespace) {
		return false
	}
	decided, inject := false, false
	v := pod.Annotations[injectLabel]
	if l, ok := pod.Labels[injectLabel]; ok {
		v = l // the label wins over the (older) annotation
	}
	switch v {
	case "true":
		decided, inject = true, true
	case "false":
		decided, inject = true, false
	}
	if !decided && matchesAny(c.NeverInjectSelector, pod.Labels) {
		decided, inject = true, false
	}
	if !decided && matchesAny(c.AlwaysInjectSelector, pod.Labels) {
		decided, inject = true, true
	}
	switch c.Policy {
	case PolicyEnabled:
		return !decided || inject
	case PolicyDisabled:
		return decided && inject
	default:
		return false
	}
}

// matchesAny reports whether a non-empty selector of sels matches l.
func matchesAny(sels []metav1.LabelSelector, l map[string]string) bool {
	for i := range sels {
		s, err := metav1.LabelSelectorAsSelector(&sels[i])
		if err != nil || s.Empty() {
			continue
		}
		if s.Matches(labels.Set(l)) {
			return true
		}
	}
	return false
}
