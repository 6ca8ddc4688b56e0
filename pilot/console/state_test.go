package console

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds"
)

func TestTypeState(t *testing.T) {
	t0 := time.Unix(1000, 0)
	t1 := t0.Add(time.Second)
	for _, tc := range []struct {
		name string
		in   xds.TypeSync
		want State
	}{
		{"nothing sent", xds.TypeSync{}, NotSent},
		{"acked the last sent", xds.TypeSync{SentNonce: "b", AckedNonce: "b", AckedAt: &t0}, Synced},
		{"sent, never answered", xds.TypeSync{SentNonce: "a"}, Stale},
		{"acked an older one, newer unanswered", xds.TypeSync{SentNonce: "b", AckedNonce: "a", AckedAt: &t0}, Stale},
		{"rejected the only one", xds.TypeSync{SentNonce: "a", NackAt: &t0, NackError: "bad"}, NACK},
		{"rejected after an ACK", xds.TypeSync{SentNonce: "b", AckedNonce: "a", AckedAt: &t0, NackAt: &t1}, NACK},
		{"acked after an old NACK", xds.TypeSync{SentNonce: "b", AckedNonce: "b", AckedAt: &t1, NackAt: &t0}, Synced},
		{"old NACK, newer ACK, newest unanswered", xds.TypeSync{SentNonce: "c", AckedNonce: "b", AckedAt: &t1, NackAt: &t0}, Stale},
	} {
		if got := TypeState(tc.in); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestProxyRows(t *testing.T) {
	long := "sidecar~10.0.0.1~" + strings.Repeat("p", 2*clientlog.MaxValue) + ".default~default.svc.cluster.local"
	status := []xds.SyncStatus{
		{ConnectionID: "b-2", NodeID: long, Types: map[string]xds.TypeSync{
			"lds": {SentNonce: "x"}, "cds": {SentNonce: "y", AckedNonce: "y"},
		}},
		{ConnectionID: "a-1", NodeID: "router~10.0.0.2~gw.istio-system~istio-system.svc.cluster.local"},
	}
	views := []xds.ProxyView{{ConnectionID: "a-1", Proxy: &model.Proxy{Type: model.Router, Namespace: "istio-system"}}}
	rows := ProxyRows(status, views)
	if len(rows) != 2 || rows[0].ConnectionID != "a-1" || rows[1].ConnectionID != "b-2" {
		t.Fatalf("rows not sorted by connection: %+v", rows)
	}
	if rows[0].Type != "router" || rows[0].Namespace != "istio-system" {
		t.Errorf("row of a-1 lacks its parsed node: %+v", rows[0])
	}
	if rows[1].Type != "" || len(rows[1].NodeID) > clientlog.MaxValue+len("…") {
		t.Errorf("row of b-2: type %q, node ID of %d bytes, want none and cut to %d", rows[1].Type, len(rows[1].NodeID), clientlog.MaxValue)
	}
	if got := rows[1].Types; len(got) != 2 || got[0].Type != "cds" || got[0].State != Synced || got[1].Type != "lds" || got[1].State != Stale {
		t.Errorf("types of b-2: %+v, want cds SYNCED then lds STALE", got)
	}
}

func TestGatherHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: ConvergenceMetric, Buckets: []float64{.1, .5, 1}})
	reg.MustRegister(h)
	for _, v := range []float64{.05, .06, .3, .7, 4} {
		h.Observe(v)
	}
	got, err := GatherHistogram(reg, ConvergenceMetric)
	if err != nil {
		t.Fatal(err)
	}
	want := []Bucket{{.1, 2}, {.5, 1}, {1, 1}, {math.Inf(1), 1}}
	if got.Count != 5 || len(got.Buckets) != len(want) {
		t.Fatalf("histogram %+v, want 5 observations in %v", got, want)
	}
	for i, b := range want {
		if got.Buckets[i] != b {
			t.Errorf("bucket %d: %+v, want %+v", i, got.Buckets[i], b)
		}
	}
	if q, _ := got.Quantile(0.5); q != .5 {
		t.Errorf("p50 bound %v, want 0.5", q)
	}
	if q, _ := got.Quantile(0.99); !math.IsInf(q, 1) {
		t.Errorf("p99 bound %v, want +Inf", q)
	}
	if l := got.Buckets[3].Label(1); l != "> 1s" {
		t.Errorf("label of the +Inf bucket: %q", l)
	}
	c := drawChart(got)
	if len(c.Bars) != 4 || c.Bars[0].H != chartPlot || c.Bars[1].H != chartPlot/2 || c.Bars[0].Y != c.AxisY-chartPlot {
		t.Errorf("bars not scaled to the fullest bucket: %+v", c.Bars)
	}

	if _, err := GatherHistogram(reg, "absent_metric"); err == nil || !strings.Contains(err.Error(), "absent_metric") {
		t.Errorf("absent metric: %v, want an error naming it", err)
	}
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "a_counter"}))
	if _, err := GatherHistogram(reg, "a_counter"); err == nil || !strings.Contains(err.Error(), "not a histogram") {
		t.Errorf("counter: %v, want an error saying it is not a histogram", err)
	}
	if _, ok := (Histogram{}).Quantile(.5); ok {
		t.Error("quantile of an empty histogram reported")
	}
}
