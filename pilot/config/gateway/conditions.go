package gateway

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// cond builds a condition of generation gen; LastTransitionTime is left for
// the status writer (kept from the current condition when unchanged).
func cond(typ string, ok bool, reason, message string, gen int64) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: gen}
}

// sameConditions reports whether a and b say the same, times aside.
func sameConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}

// keepTransitionTimes gives each condition of want the LastTransitionTime of
// the condition of the same type in cur when its status did not change, and
// now otherwise.
func keepTransitionTimes(want, cur []metav1.Condition, now metav1.Time) {
	for i := range want {
		want[i].LastTransitionTime = now
		for _, c := range cur {
			if c.Type == want[i].Type && c.Status == want[i].Status && !c.LastTransitionTime.IsZero() {
				want[i].LastTransitionTime = c.LastTransitionTime
			}
		}
	}
}

// routeConds are a route's ResolvedRefs and Accepted conditions while its
// rules are translated: each keeps its first failure.
type routeConds struct {
	gen                int64
	resolved, accepted metav1.Condition
}

func newRouteConds(gen int64) *routeConds {
	return &routeConds{
		gen:      gen,
		resolved: cond(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "", gen),
		accepted: cond(string(gwv1.RouteConditionAccepted), true, string(gwv1.RouteReasonAccepted), "", gen),
	}
}

// unresolved records a reference that does not resolve, unless one did before.
func (c *routeConds) unresolved(reason gwv1.RouteConditionReason, msg string) {
	if c.resolved.Status == metav1.ConditionTrue {
		c.resolved = cond(string(gwv1.RouteConditionResolvedRefs), false, string(reason), msg, c.gen)
	}
}

// unsupported records an unsupported value, unless one was before.
func (c *routeConds) unsupported(msg string) {
	if c.accepted.Status == metav1.ConditionTrue {
		c.accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), msg, c.gen)
	}
}
