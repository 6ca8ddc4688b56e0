package autoregistration

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
)

// updateHealth writes a health report as k's Healthy condition, unless
// another replica now controls k or a later report was already written.
// The condition's other fields and the status' other conditions are kept.
func (c *Controller) updateHealth(ctx context.Context, k entryKey, h healthEvent) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	entries := c.opts.Client.NetworkingV1().WorkloadEntries(k.namespace)
	cur, err := c.controlled(ctx, k)
	if cur == nil {
		return err
	}
	next := cur.DeepCopy()
	cond := healthCondition(next.Status.GetConditions(), h)
	if cond == nil {
		return nil
	}
	conds := make([]*metav1alpha1.IstioCondition, 0, len(next.Status.Conditions)+1)
	for _, other := range next.Status.Conditions {
		if other.GetType() != serviceentry.ConditionHealthy {
			conds = append(conds, other)
		}
	}
	next.Status.Conditions = append(conds, cond)
	if _, err := entries.UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		return err
	}
	c.opts.Log.Debug("WorkloadEntry health updated", "entry", k.String(), "healthy", h.healthy)
	return nil
}

// healthCondition is the Healthy condition h makes of the current ones;
// nil when the current one was probed later than h. The transition time
// moves only when the status changes.
func healthCondition(current []*metav1alpha1.IstioCondition, h healthEvent) *metav1alpha1.IstioCondition {
	st := "False"
	if h.healthy {
		st = "True"
	}
	at := timestamppb.New(h.at)
	cond := &metav1alpha1.IstioCondition{
		Type: serviceentry.ConditionHealthy, Status: st, Message: h.message,
		LastProbeTime: at, LastTransitionTime: at,
	}
	for _, old := range current {
		if old.GetType() != serviceentry.ConditionHealthy {
			continue
		}
		if old.GetLastProbeTime() != nil && old.GetLastProbeTime().AsTime().After(h.at) {
			return nil
		}
		if old.GetStatus() == st && old.GetLastTransitionTime() != nil {
			cond.LastTransitionTime = old.GetLastTransitionTime()
		}
	}
	return cond
}

// hasHealth reports whether conditions hold a Healthy condition.
func hasHealth(conditions []*metav1alpha1.IstioCondition) bool {
	for _, c := range conditions {
		if c.GetType() == serviceentry.ConditionHealthy {
			return true
		}
	}
	return false
}

// clearHealth removes cur's Healthy condition (cur is k as just read; the
// write is conditional on that version).
func (c *Controller) clearHealth(ctx context.Context, k entryKey, cur *networkingv1.WorkloadEntry) {
	if !hasHealth(cur.Status.GetConditions()) {
		return
	}
	next := cur.DeepCopy()
	conds := next.Status.Conditions[:0]
	for _, other := range next.Status.Conditions {
		if other.GetType() != serviceentry.ConditionHealthy {
			conds = append(conds, other)
		}
	}
	next.Status.Conditions = conds
	_, err := c.opts.Client.NetworkingV1().WorkloadEntries(k.namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	switch {
	case err == nil:
		c.opts.Log.Info("health-checked WorkloadEntry's health cleared: its proxy did not reconnect", "entry", k.String())
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
	default:
		c.failed(k, "health cleanup", err)
	}
}
