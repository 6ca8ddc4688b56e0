package configstatus

import (
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/model"
)

// recordingMetrics is a Metrics that keeps what it was told.
type recordingMetrics struct {
	observed []float64
	rejected map[string]int
}

func (m *recordingMetrics) ObservePropagation(s float64) { m.observed = append(m.observed, s) }
func (m *recordingMetrics) SetRejected(kind, ns, name string, n int) {
	if n == 0 {
		delete(m.rejected, kind+"/"+ns+"/"+name)
		return
	}
	m.rejected[kind+"/"+ns+"/"+name] = n
}

var key = model.ConfigKey{Kind: model.KindVirtualService, Namespace: "default", Name: "reviews"}

func counts(t *testing.T, tr *Tracker) (affected, applied, pending, rejected int) {
	t.Helper()
	st, ok := tr.Status(key)
	if !ok {
		t.Fatal("no status")
	}
	return st.Affected, st.Applied, st.Pending, st.Rejected
}

func TestCountsFollowACKsNACKsGenerationsAndConnections(t *testing.T) {
	m := &recordingMetrics{rejected: map[string]int{}}
	var changed []model.ConfigKey
	tr := New(m, func(k model.ConfigKey) { changed = append(changed, k) })
	start := time.Now()
	for n := uint64(1); n <= 3; n++ {
		tr.Connected(n, "proxy-"+string(rune('0'+n)), false)
		tr.Acked(n, model.ClusterType, 0, start) // initial config
		tr.Watching(n, model.ListenerType)
	}
	tr.Round(5, start, []Change{{Key: key, Generation: 1, Reached: []uint64{1, 2, 3}, Types: []string{model.ListenerType, model.RouteType}},
		{Key: model.ConfigKey{Kind: model.KindService, Name: "ignored"}}})
	if tr.Len() != 1 {
		t.Fatalf("tracked %d objects, want only the Istio kind", tr.Len())
	}
	if a, ap, p, _ := counts(t, tr); a != 3 || ap != 0 || p != 3 {
		t.Fatalf("before answers: %d affected %d applied %d pending", a, ap, p)
	}
	// An ACK of an older round does not apply the change; of this one it does.
	tr.Acked(1, model.ListenerType, 4, start)
	tr.Acked(2, model.ListenerType, 5, start.Add(time.Second))
	tr.Acked(3, model.ListenerType, 6, start.Add(2*time.Second))
	tr.Nacked(1, model.ListenerType, 5, strings.Repeat("x", 10*MaxMessage))
	tr.Settle()
	st, _ := tr.Status(key)
	if st.Applied != 2 || st.Rejected != 1 || st.Pending != 0 || len(st.Rejections) != 1 ||
		st.Rejections[0].ProxyID != "proxy-1" || len(st.Rejections[0].Message) > MaxMessage+64 || st.AppliedAt != nil {
		t.Fatalf("after answers: %+v", st)
	}
	if m.rejected["VirtualService/default/reviews"] != 1 {
		t.Fatalf("rejected gauge = %v, want 1", m.rejected)
	}
	// Generation 2 in round 7: the count starts again.
	tr.Round(7, start, []Change{{Key: key, Generation: 2, Reached: []uint64{1, 2, 3}, Types: []string{model.ListenerType}}})
	if _, ap, p, r := counts(t, tr); ap != 0 || p != 3 || r != 0 {
		t.Fatalf("after generation bump: %d applied %d pending %d rejected", ap, p, r)
	}
	for n := uint64(1); n <= 3; n++ {
		tr.Acked(n, model.ListenerType, 7, start.Add(3*time.Second))
	}
	tr.Settle()
	st, _ = tr.Status(key)
	if st.Applied != 3 || st.ObservedGeneration != 2 || st.AppliedAt == nil || !st.AppliedAt.Equal(start.Add(3*time.Second)) {
		t.Fatalf("generation 2 applied: %+v", st)
	}
	if len(m.observed) != 1 || m.observed[0] != 3 || len(m.rejected) != 0 {
		t.Fatalf("metrics: observed %v rejected %v; want one 3s propagation, no rejection", m.observed, m.rejected)
	}
	tr.Disconnected(2)
	tr.Settle()
	if a, ap, _, _ := counts(t, tr); a != 2 || ap != 2 {
		t.Fatalf("after a disconnect: %d of %d", ap, a)
	}
	changed = nil
	tr.Round(8, start, []Change{{Key: key, Deleted: true}})
	if _, ok := tr.Status(key); ok || len(changed) != 1 {
		t.Fatalf("deleted object: status kept or not notified (%v)", changed)
	}
}
