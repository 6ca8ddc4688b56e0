package kube

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	metav1alpha1 "istio.io/api/meta/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/configstatus"
)

func TestDesiredStatusKeepsOtherConditionsAndTransitionTimes(t *testing.T) {
	old := timestamppb.New(time.Unix(1000, 0))
	cur := &metav1alpha1.IstioStatus{
		ObservedGeneration: 1,
		Conditions: []*metav1alpha1.IstioCondition{
			{Type: "SomethingElse", Status: "True"},
			{Type: ConditionReconciled, Status: "True", Reason: "Applied", LastTransitionTime: old},
			{Type: ConditionValidated, Status: "True", Reason: "Accepted", LastTransitionTime: old},
		},
	}
	st := configstatus.ConfigStatus{ObservedGeneration: 2, Affected: 500, Applied: 498, Rejected: 2,
		Rejections: []configstatus.Rejection{{ProxyID: "sidecar~10.0.0.1~a.default~default.svc.cluster.local", Type: "rds", Message: "bad route"}}}
	want := desiredStatus(st, cur)
	if want.GetObservedGeneration() != 2 || len(want.GetConditions()) != 3 || want.GetConditions()[0].GetType() != "SomethingElse" {
		t.Fatalf("desired = %v", want)
	}
	rec, val := findCondition(want, ConditionReconciled), findCondition(want, ConditionValidated)
	const msg = "applied by 498 of 500 affected proxies; 2 rejected: bad route (sidecar~10.0.0.1~a.default~default.svc.cluster.local, rds)"
	if rec.GetStatus() != "False" || rec.GetReason() != "Rejected" || rec.GetMessage() != msg || rec.GetLastTransitionTime().AsTime().Equal(old.AsTime()) {
		t.Fatalf("Reconciled = %v, want False/Rejected %q with a new transition time", rec, msg)
	}
	if !val.GetLastTransitionTime().AsTime().Equal(old.AsTime()) || val.GetObservedGeneration() != 2 {
		t.Fatalf("Validated = %v, want its old transition time kept", val)
	}
	if sameStatus(cur, want) {
		t.Fatal("sameStatus: a changed Reconciled condition compares equal")
	}
	// Written as is, the next identical answer is no change.
	again := desiredStatus(st, want)
	if !sameStatus(want, again) {
		t.Fatalf("sameStatus(%v, %v) = false for the same answer", want, again)
	}
	pending := configstatus.ConfigStatus{ObservedGeneration: 2, Affected: 3, Applied: 1, Pending: 2}
	if got := pending.Summary(); got != "applied by 1 of 3 affected proxies; 2 pending" {
		t.Fatalf("pending message %q", got)
	}
}

var vsKey = model.ConfigKey{Kind: model.KindVirtualService, Namespace: "default", Name: "reviews"}

func TestStatusWriterMarkCoalescesPerObject(t *testing.T) {
	w := &StatusWriter{dirty: map[model.ConfigKey]struct{}{}, kick: make(chan struct{}, 1)}
	for range 200 {
		w.Mark(vsKey)
	}
	w.Mark(model.ConfigKey{Kind: "Service", Name: "x"}) // not a status kind
	if _, ok := w.next(); !ok {
		t.Fatal("nothing dirty after Mark")
	}
	if k, ok := w.next(); ok {
		t.Fatalf("200 marks of one object and a Service left a second entry %v", k)
	}
}

// A progressive rollout shows in Reconciled: False while canarying or
// halted, with the counts of the canaries and why it halted.
func TestDesiredStatusRollout(t *testing.T) {
	for _, tc := range []struct {
		st             configstatus.ConfigStatus
		status, reason string
		msg            string
	}{
		{
			st:     configstatus.ConfigStatus{Affected: 10, Applied: 4, Pending: 6, Rollout: &configstatus.Rollout{Phase: "Canary", Canaries: 10, Applied: 4}},
			status: "False", reason: "RolloutCanary",
			msg: "canary rollout, the change is held from the other affected proxies; applied by 4 of 10 canaries; 6 pending",
		},
		{
			st: configstatus.ConfigStatus{Affected: 10, Applied: 9, Rejected: 1,
				Rejections: []configstatus.Rejection{{ProxyID: "p1", Type: "lds", Message: "bad"}},
				Rollout:    &configstatus.Rollout{Phase: "Halted", Canaries: 10, Applied: 9, Message: "canary p1 rejected it: bad"}},
			status: "False", reason: "RolloutHalted",
			msg: "rollout halted, the change is held from every proxy: canary p1 rejected it: bad; applied by 9 of 10 canaries; 1 rejected: bad (p1, lds)",
		},
		{
			st:     configstatus.ConfigStatus{Affected: 100, Applied: 100, Rollout: &configstatus.Rollout{Phase: "Promoted", Canaries: 10, Applied: 10}},
			status: "True", reason: "Applied", msg: "applied by 100 of 100 affected proxies",
		},
	} {
		rec := findCondition(desiredStatus(tc.st, nil), ConditionReconciled)
		if rec.GetStatus() != tc.status || rec.GetReason() != tc.reason || rec.GetMessage() != tc.msg {
			t.Errorf("%s: Reconciled = %s/%s %q, want %s/%s %q", tc.st.Rollout.Phase, rec.GetStatus(), rec.GetReason(), rec.GetMessage(), tc.status, tc.reason, tc.msg)
		}
	}
}
