package stats

import (
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	cases := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"p50 of four", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p90 of four", ms(1, 2, 3, 4), 90, 4 * time.Millisecond},
		{"p50 of five", ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"p1 of hundred", hundred, 1, 1 * time.Millisecond},
		{"p90 of hundred", hundred, 90, 90 * time.Millisecond},
		{"p99 of hundred", hundred, 99, 99 * time.Millisecond},
		{"p100 of hundred", hundred, 100, 100 * time.Millisecond},
		{"p0 clamps to first", hundred, 0, 1 * time.Millisecond},
	}
	for _, c := range cases {
		if got := Percentile(c.sorted, c.p); got != c.want {
			t.Errorf("%s: Percentile(p%v) = %v, want %v", c.name, c.p, got, c.want)
		}
	}
}

func TestSummarizeSortsACopy(t *testing.T) {
	in := ms(30, 10, 20, 50, 40)
	got := Summarize(in)
	want := Summary{Count: 5, P50Ms: 30, P90Ms: 50, P99Ms: 50, MaxMs: 50}
	if got != want {
		t.Fatalf("Summarize = %+v, want %+v", got, want)
	}
	if in[0] != 30*time.Millisecond {
		t.Fatalf("Summarize reordered its input: %v", in)
	}
	if (Summarize(nil) != Summary{}) {
		t.Fatalf("Summarize(nil) = %+v, want zero", Summarize(nil))
	}
}

func TestMedian(t *testing.T) {
	cases := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2},
	}
	for _, c := range cases {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
