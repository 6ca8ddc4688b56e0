package deploy

import (
	"cmp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwlisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"
)

// ListenerSetServed reports whether the cluster serves ListenerSet in
// gateway.networking.k8s.io/v1 (an informer of a kind not served would
// never sync).
func ListenerSetServed(c gwclient.Interface) bool {
	list, err := c.Discovery().ServerResourcesForGroupVersion(gwv1.GroupVersion.String())
	if err != nil {
		return false
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Kind == "ListenerSet" })
}

// listenerSetParent is the Gateway a ListenerSet names, if it names one.
func listenerSetParent(ls *gwv1.ListenerSet) (types.NamespacedName, bool) {
	ref := ls.Spec.ParentRef
	if (ref.Group != nil && string(*ref.Group) != gwv1.GroupName) || (ref.Kind != nil && string(*ref.Kind) != "Gateway") {
		return types.NamespacedName{}, false
	}
	ns := ls.Namespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return types.NamespacedName{Namespace: ns, Name: string(ref.Name)}, true
}

// enqueueListenerSet enqueues the Gateway a ListenerSet names: its
// listeners (once accepted) open ports of that Gateway's Service.
func (r *run) enqueueListenerSet(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	ls, ok := obj.(*gwv1.ListenerSet)
	if !ok {
		return
	}
	if key, ok := listenerSetParent(ls); ok {
		r.queue.Add(key)
	}
}

// withListenerSets returns gw with the listeners of its ListenerSets
// appended, those the status writer (the gateway controller, on the same
// leader) reported Accepted, in precedence order: their ports go on the
// Service as the Gateway's own do. Reading the status keeps one place
// deciding what attaches (allowedListeners, conflicts, the listener cap);
// its write is a ListenerSet update, which enqueues the Gateway again.
func withListenerSets(gw *gwv1.Gateway, sets gwlisters.ListenerSetLister) *gwv1.Gateway {
	if sets == nil {
		return gw
	}
	all, err := sets.List(labels.Everything())
	if err != nil {
		return gw
	}
	key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
	var mine []*gwv1.ListenerSet
	for _, ls := range all {
		if p, ok := listenerSetParent(ls); ok && p == key && meta.IsStatusConditionTrue(ls.Status.Conditions, string(gwv1.ListenerSetConditionAccepted)) {
			mine = append(mine, ls)
		}
	}
	if len(mine) == 0 {
		return gw
	}
	slices.SortFunc(mine, func(a, b *gwv1.ListenerSet) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	out := gw.DeepCopy()
	for _, ls := range mine {
		for _, l := range ls.Spec.Listeners {
			i := slices.IndexFunc(ls.Status.Listeners, func(s gwv1.ListenerEntryStatus) bool { return s.Name == l.Name })
			if i < 0 || !meta.IsStatusConditionTrue(ls.Status.Listeners[i].Conditions, string(gwv1.ListenerEntryConditionAccepted)) {
				continue
			}
			out.Spec.Listeners = append(out.Spec.Listeners, gwv1.Listener{Name: l.Name, Port: l.Port, Protocol: l.Protocol})
		}
	}
	return out
}
