package gateway

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/model"
)

// KindListenerSet is the Gateway API kind adding listeners to a Gateway
// (v1 since Gateway API v1.5).
const KindListenerSet = "ListenerSet"

// MaxListenersPerGateway bounds the listeners one Gateway serves, its own
// and those of its ListenerSets together. The CRDs cap each object (64
// listeners), not their number: without a cap, many ListenerSets could
// give one Gateway's proxies thousands of servers. Listeners beyond it, in
// precedence order, are Accepted=False, reason TooManyListeners.
const MaxListenersPerGateway = 512

// listenerSetState is a ListenerSet of one of our Gateways during
// translation.
type listenerSetState struct {
	ls *gwv1.ListenerSet
	// accepted: the Gateway allows it and one of its listeners is valid;
	// routes attach to its listeners only then.
	accepted  bool
	listeners []*listener
	status    gwv1.ListenerSetStatus
}

// listenerSetInternalName names the Istio Gateway of a ListenerSet's
// listener: unlike a Gateway's listener names, a set's may repeat those of
// the Gateway or of another set.
func listenerSetInternalName(gw string, ls *gwv1.ListenerSet, listener gwv1.SectionName) string {
	return internalName(gw, "ls."+ls.Namespace+"."+ls.Name+"."+string(listener))
}

// listenerSetParent returns the Gateway a ListenerSet names and whether its
// parentRef names a Gateway at all.
func listenerSetParent(ls *gwv1.ListenerSet) (types.NamespacedName, bool) {
	ref := ls.Spec.ParentRef
	if string(deref(ref.Group, Group)) != Group || string(deref(ref.Kind, KindGateway)) != KindGateway {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: string(deref(ref.Namespace, gwv1.Namespace(ls.Namespace))), Name: string(ref.Name)}, true
}

// allowsListenerSet reports whether gw's allowedListeners admit
// ListenerSets of namespace ns (by default none do).
func (t *translator) allowsListenerSet(gw *gwv1.Gateway, ns string) bool {
	if gw.Spec.AllowedListeners == nil || gw.Spec.AllowedListeners.Namespaces == nil {
		return false
	}
	n := gw.Spec.AllowedListeners.Namespaces
	switch deref(n.From, gwv1.NamespacesFromNone) {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSame:
		return ns == gw.Namespace
	case gwv1.NamespacesFromSelector:
		if n.Selector == nil {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(n.Selector)
		if err != nil {
			return false
		}
		return s.Matches(labels.Set(t.in.namespaceLabels(ns)))
	}
	return false
}

// listenersAllowed reports whether gw takes ListenerSets at all (its
// status then reports attachedListenerSets).
func listenersAllowed(gw *gwv1.Gateway) bool {
	return gw.Spec.AllowedListeners != nil && gw.Spec.AllowedListeners.Namespaces != nil &&
		deref(gw.Spec.AllowedListeners.Namespaces.From, gwv1.NamespacesFromNone) != gwv1.NamespacesFromNone
}

// attachListenerSets merges the ListenerSets of our Gateways into them, in
// the spec's precedence order (a Gateway's own listeners first, then sets
// oldest first, then by namespace and name): a set's listener that shares
// a port with an earlier listener in another protocol, or in the same
// protocol with the same hostname, is Accepted=False (ProtocolConflict,
// HostnameConflict); the earlier one keeps serving. It returns the Istio
// Gateways of the valid listeners.
func (t *translator) attachListenerSets(sets []*gwv1.ListenerSet) []model.Config {
	var out []model.Config
	for _, ls := range sortedObjects(sets) {
		key, ok := listenerSetParent(ls)
		if !ok {
			continue
		}
		gw, ok := t.gateways[key]
		if !ok {
			// Not a Gateway of ours: another controller's set.
			continue
		}
		st := &listenerSetState{ls: ls}
		t.listenerSets[types.NamespacedName{Namespace: ls.Namespace, Name: ls.Name}] = st
		gen := ls.Generation
		setConds := func(ok bool, reason gwv1.ListenerSetConditionReason, progReason gwv1.ListenerSetConditionReason, msg string) {
			st.status.Conditions = []metav1.Condition{
				cond(string(gwv1.ListenerSetConditionAccepted), ok, string(reason), msg, gen),
				cond(string(gwv1.ListenerSetConditionProgrammed), ok, string(progReason), msg, gen),
			}
		}
		if !t.allowsListenerSet(gw.gw, ls.Namespace) {
			setConds(false, gwv1.ListenerSetReasonNotAllowed, gwv1.ListenerSetReasonNotAllowed,
				fmt.Sprintf("Gateway %s/%s does not allow ListenerSets of namespace %s (spec.allowedListeners)", key.Namespace, key.Name, ls.Namespace))
			continue
		}
		if !conditionTrue(gw.status.Conditions, string(gwv1.GatewayConditionAccepted)) {
			setConds(false, gwv1.ListenerSetReasonParentNotAccepted, gwv1.ListenerSetReasonParentNotAccepted,
				fmt.Sprintf("Gateway %s/%s is not accepted", key.Namespace, key.Name))
			continue
		}
		valid := 0
		var tooMany []metav1.Condition
		for i := range ls.Spec.Listeners {
			entry := &ls.Spec.Listeners[i]
			spec := &gwv1.Listener{Name: entry.Name, Hostname: entry.Hostname, Port: entry.Port, Protocol: entry.Protocol,
				TLS: entry.TLS, AllowedRoutes: entry.AllowedRoutes}
			if gw.served >= MaxListenersPerGateway {
				// Past the cap, a listener is neither checked nor compared
				// with the others, and its conditions are shared: what a
				// flood of sets costs stays small and linear.
				if tooMany == nil {
					tooMany = tooManyConditions(key, gen)
				}
				st.listeners = append(st.listeners, &listener{gw: gw.gw, spec: spec, namespace: ls.Namespace, set: ls,
					status: &gwv1.ListenerStatus{Name: entry.Name, SupportedKinds: []gwv1.RouteGroupKind{}, Conditions: tooMany}})
				continue
			}
			chk := listenerCheck{owner: owner{kind: KindListenerSet, namespace: ls.Namespace, name: ls.Name, gen: gen}, rejectConflict: true}
			if winner, reason := gw.conflictWith(spec); winner != nil {
				chk.conflict, chk.conflictMsg = reason, fmt.Sprintf("port %d is taken by listener %s, of higher precedence", spec.Port, winner.describe())
			}
			l, tls := t.checkListener(chk, gw.gw, spec, listenerSetInternalName(gw.gw.Name, ls, entry.Name))
			l.set = ls
			st.listeners = append(st.listeners, l)
			if l.status.Conditions[0].Status == metav1.ConditionTrue {
				// An accepted listener holds its port and hostname, even
				// when its references do not resolve.
				gw.claimed = append(gw.claimed, l)
				gw.served++
			}
			if l.valid {
				valid++
				out = append(out, t.internalGateway(l, tls))
			}
		}
		switch {
		case valid == len(ls.Spec.Listeners) && valid > 0:
			setConds(true, gwv1.ListenerSetReasonAccepted, gwv1.ListenerSetReasonProgrammed, "")
		case valid > 0:
			st.status.Conditions = []metav1.Condition{
				cond(string(gwv1.ListenerSetConditionAccepted), true, string(gwv1.ListenerSetReasonListenersNotValid), "some listeners are not valid", gen),
				cond(string(gwv1.ListenerSetConditionProgrammed), true, string(gwv1.ListenerSetReasonProgrammed), "", gen),
			}
		default:
			setConds(false, gwv1.ListenerSetReasonListenersNotValid, gwv1.ListenerSetReasonListenersNotValid, "no listener is valid")
		}
		st.accepted = valid > 0
		if st.accepted {
			gw.attachedSets++
		}
	}
	return out
}

// tooManyConditions are the conditions of a listener past
// MaxListenersPerGateway.
func tooManyConditions(gw types.NamespacedName, gen int64) []metav1.Condition {
	msg := fmt.Sprintf("Gateway %s/%s already has %d listeners, the most one Gateway serves", gw.Namespace, gw.Name, MaxListenersPerGateway)
	return []metav1.Condition{
		cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerEntryReasonTooManyListeners), msg, gen),
		cond(string(gwv1.ListenerConditionProgrammed), false, string(gwv1.ListenerEntryReasonTooManyListeners), msg, gen),
		cond(string(gwv1.ListenerConditionResolvedRefs), true, string(gwv1.ListenerReasonResolvedRefs), "", gen),
		cond(string(gwv1.ListenerConditionConflicted), false, string(gwv1.ListenerReasonNoConflicts), "", gen),
	}
}

// conflictWith returns the listener of higher precedence (the Gateway's
// own, or an accepted one of an earlier ListenerSet) that l conflicts
// with, and the reason.
func (g *gatewayState) conflictWith(l *gwv1.Listener) (*listener, gwv1.ListenerConditionReason) {
	for _, o := range g.claimed {
		if o.spec.Port != l.Port {
			continue
		}
		if o.spec.Protocol != l.Protocol || mixedTLSModes(o.spec, l) {
			return o, gwv1.ListenerReasonProtocolConflict
		}
		if conflictHostname(o.spec) == conflictHostname(l) {
			return o, gwv1.ListenerReasonHostnameConflict
		}
	}
	return nil, ""
}

// describe names a listener in messages.
func (l *listener) describe() string {
	if l.set != nil {
		return fmt.Sprintf("%s of ListenerSet %s/%s", l.spec.Name, l.set.Namespace, l.set.Name)
	}
	return fmt.Sprintf("%s of Gateway %s/%s", l.spec.Name, l.gw.Namespace, l.gw.Name)
}

// listenerSetStatus is the status of a ListenerSet with its listeners'
// attachedRoutes counted.
func (st *listenerSetState) listenerSetStatus() gwv1.ListenerSetStatus {
	out := gwv1.ListenerSetStatus{Conditions: st.status.Conditions}
	for _, l := range st.listeners {
		out.Listeners = append(out.Listeners, gwv1.ListenerEntryStatus{
			Name: l.status.Name, SupportedKinds: l.status.SupportedKinds,
			AttachedRoutes: l.status.AttachedRoutes, Conditions: l.status.Conditions,
		})
	}
	return out
}

// conditionTrue reports whether conds has a condition of type typ with status True.
func conditionTrue(conds []metav1.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
