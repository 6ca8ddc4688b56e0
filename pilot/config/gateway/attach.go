package gateway

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// route is what attachment and status need of a route of any kind: its
// kind, metadata, parentRefs and hostnames (none for TCP and UDP routes).
// Its fields are named as the Gateway API objects' are.
type route struct {
	kind string
	*metav1.ObjectMeta
	Spec routeSpec
}

type routeSpec struct {
	ParentRefs []gwv1.ParentReference
	Hostnames  []gwv1.Hostname
}

// newRoute describes a route of kind from its metadata and spec.
func newRoute(kind string, meta *metav1.ObjectMeta, common gwv1.CommonRouteSpec, hostnames []gwv1.Hostname) *route {
	return &route{kind: kind, ObjectMeta: meta, Spec: routeSpec{ParentRefs: common.ParentRefs, Hostnames: hostnames}}
}

// attachment is a route attached to one listener, for the hostnames both
// accept.
type attachment struct {
	l     *listener
	hosts []string
	// mesh is set instead of l for a route attached to a Service (mesh.go).
	mesh *meshParent
	// order is the route's place among routes (oldest first).
	order int
}

// attachRoute finds the listeners each parentRef of r (a Gateway of ours)
// attaches it to, counts r in their attachedRoutes, and returns r's parent
// statuses and its attachments. A core Service parent makes r a mesh route
// (attachToService). Other parents that are not Gateways of ours get no
// status: another controller owns them.
func (t *translator) attachRoute(r *route, order int, resolved, accepted metav1.Condition) ([]gwv1.RouteParentStatus, []attachment) {
	var parents []gwv1.RouteParentStatus
	var out []attachment
	gen := r.Generation
	for _, ref := range r.Spec.ParentRefs {
		if isMeshParent(ref) {
			// mesh.go builds HTTP rules only: TCPRoute and TLSRoute with a
			// Service parent are not served.
			var atts []attachment
			acc := cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), r.kind+" with a Service parent (mesh) is not supported", gen)
			if r.kind == KindHTTPRoute || r.kind == KindGRPCRoute {
				acc, atts = t.attachToService(r, ref, order, accepted)
			}
			out = append(out, atts...)
			parents = append(parents, gwv1.RouteParentStatus{ParentRef: ref, ControllerName: ControllerName, Conditions: []metav1.Condition{acc, resolved}})
			continue
		}
		if string(deref(ref.Group, Group)) != Group {
			continue
		}
		key := types.NamespacedName{Namespace: string(deref(ref.Namespace, gwv1.Namespace(r.Namespace))), Name: string(ref.Name)}
		var listeners []*listener
		switch string(deref(ref.Kind, KindGateway)) {
		case KindGateway:
			gw, ok := t.gateways[key]
			if !ok {
				continue
			}
			// A Gateway parent takes its own listeners only, not its
			// ListenerSets'.
			listeners = gw.listeners
		case KindListenerSet:
			set, ok := t.listenerSets[key]
			if !ok {
				continue
			}
			listeners = set.listeners
		default:
			continue
		}
		acc := accepted
		if acc.Status == metav1.ConditionTrue {
			var atts []attachment
			acc, atts = t.attachToListeners(r, ref, listeners, gen)
			for i := range atts {
				atts[i].order = order
			}
			// Routes attach whatever their backends: unresolved ones
			// answer 500.
			out = append(out, atts...)
		}
		parents = append(parents, gwv1.RouteParentStatus{
			ParentRef:      ref,
			ControllerName: ControllerName,
			Conditions:     []metav1.Condition{acc, resolved},
		})
	}
	return parents, out
}

// attachToListeners attaches r through one parentRef to the listeners of
// its parent (a Gateway or a ListenerSet) and says why it is not accepted when none takes it: NoMatchingParent (no
// listener of that sectionName or port), NotAllowedByListeners or
// NoMatchingListenerHostname.
func (t *translator) attachToListeners(r *route, ref gwv1.ParentReference, listeners []*listener, gen int64) (metav1.Condition, []attachment) {
	var out []attachment
	matched, allowed, attached := false, false, false
	for _, l := range listeners {
		if ref.SectionName != nil && *ref.SectionName != l.spec.Name {
			continue
		}
		if ref.Port != nil && *ref.Port != l.spec.Port {
			continue
		}
		matched = true
		if !l.allowsKind(r.kind) || !l.allowsRoute(r.Namespace, t.in.namespaceLabels) {
			continue
		}
		allowed = true
		hosts := intersectHosts(l.hostname(), r.Spec.Hostnames)
		if len(hosts) == 0 {
			continue
		}
		// Attachment depends only on allowedRoutes, parentRefs and
		// hostnames: a route on a listener that is not valid (a
		// certificateRef unresolved, a conflict) is attached and
		// counted, but no server carries it.
		l.status.AttachedRoutes++
		attached = true
		if l.valid {
			out = append(out, attachment{l: l, hosts: hosts})
		}
	}
	typ := string(gwv1.RouteConditionAccepted)
	switch {
	case attached:
		return cond(typ, true, string(gwv1.RouteReasonAccepted), "", gen), out
	case !matched:
		return cond(typ, false, string(gwv1.RouteReasonNoMatchingParent), describeRef(ref)+": no such listener", gen), nil
	case !allowed:
		return cond(typ, false, string(gwv1.RouteReasonNotAllowedByListeners), describeRef(ref)+": no listener allows this route", gen), nil
	default:
		return cond(typ, false, string(gwv1.RouteReasonNoMatchingListenerHostname), describeRef(ref)+": no hostname matches a listener's", gen), nil
	}
}

func describeRef(ref gwv1.ParentReference) string {
	s := string(deref(ref.Kind, KindGateway)) + " " + string(ref.Name)
	if ref.SectionName != nil {
		s += " listener " + string(*ref.SectionName)
	}
	if ref.Port != nil {
		s += fmt.Sprintf(" port %d", *ref.Port)
	}
	return s
}

// intersectHosts returns the hostnames a listener of hostname lh serves
// of a route's hostnames: a route without hostnames takes the listener's;
// of two matching names the more specific is kept.
func intersectHosts(lh string, routeHosts []gwv1.Hostname) []string {
	if len(routeHosts) == 0 {
		return []string{lh}
	}
	var out []string
	for _, rh := range routeHosts {
		h := string(rh)
		switch {
		case lh == "*" || lh == h:
			out = appendNew(out, h)
		case hostCovers(lh, h):
			out = appendNew(out, h)
		case hostCovers(h, lh):
			out = appendNew(out, lh)
		}
	}
	return out
}

// hostCovers reports whether pattern (maybe "*.suffix") matches host; a
// wildcard matches one or more labels, never the bare suffix.
func hostCovers(pattern, host string) bool {
	if pattern == host {
		return true
	}
	suffix, ok := strings.CutPrefix(pattern, "*")
	if !ok {
		return false
	}
	if rest, ok := strings.CutPrefix(host, "*"); ok {
		// A wildcard covers a narrower wildcard.
		return strings.HasSuffix(rest, suffix) && len(rest) > len(suffix)
	}
	return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
