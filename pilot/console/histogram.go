package console

import (
	"fmt"
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// ConvergenceMetric is the histogram the console draws.
const ConvergenceMetric = "pilot_proxy_convergence_time"

// Histogram is a Prometheus histogram summed over its label sets.
type Histogram struct {
	Name  string
	Count uint64
	Sum   float64
	// Buckets are non-cumulative: observations in (previous bound, UpperBound];
	// the last one's bound is +Inf.
	Buckets []Bucket
}

// Bucket is one bar of a histogram.
type Bucket struct {
	UpperBound float64
	Count      uint64
}

// Label is the bucket's upper bound for display: "≤ 0.5s" or "> 30s".
func (b Bucket) Label(prev float64) string {
	if math.IsInf(b.UpperBound, 1) {
		return "> " + strconv.FormatFloat(prev, 'g', -1, 64) + "s"
	}
	return "≤ " + strconv.FormatFloat(b.UpperBound, 'g', -1, 64) + "s"
}

// Quantile returns the upper bound of the bucket that holds quantile q
// (0 < q ≤ 1), the coarse estimate a histogram allows; ok is false
// without observations.
func (h Histogram) Quantile(q float64) (bound float64, ok bool) {
	if h.Count == 0 {
		return 0, false
	}
	rank := q * float64(h.Count)
	var cum uint64
	for _, b := range h.Buckets {
		cum += b.Count
		if float64(cum) >= rank {
			return b.UpperBound, true
		}
	}
	return math.Inf(1), true
}

// GatherHistogram reads histogram name from g, summing every label set.
func GatherHistogram(g prometheus.Gatherer, name string) (Histogram, error) {
	families, err := g.Gather()
	if err != nil {
		return Histogram{}, fmt.Errorf("gather metrics for %s: %w", name, err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		if f.GetType() != dto.MetricType_HISTOGRAM {
			return Histogram{}, fmt.Errorf("metric %s is a %s, not a histogram", name, f.GetType())
		}
		return sumHistograms(name, f.GetMetric()), nil
	}
	return Histogram{}, fmt.Errorf("metric %s is not registered", name)
}

// sumHistograms adds the metrics' buckets; label sets of one family share
// their bounds.
func sumHistograms(name string, metrics []*dto.Metric) Histogram {
	h := Histogram{Name: name}
	var cumulative []uint64
	var bounds []float64
	for _, m := range metrics {
		hm := m.GetHistogram()
		h.Count += hm.GetSampleCount()
		h.Sum += hm.GetSampleSum()
		for i, b := range hm.GetBucket() {
			if math.IsInf(b.GetUpperBound(), 1) {
				continue // implicit below
			}
			if i == len(bounds) {
				bounds = append(bounds, b.GetUpperBound())
				cumulative = append(cumulative, 0)
			}
			if i < len(cumulative) {
				cumulative[i] += b.GetCumulativeCount()
			}
		}
	}
	var prev uint64
	for i, c := range cumulative {
		h.Buckets = append(h.Buckets, Bucket{UpperBound: bounds[i], Count: c - prev})
		prev = c
	}
	h.Buckets = append(h.Buckets, Bucket{UpperBound: math.Inf(1), Count: h.Count - prev})
	return h
}

// bar is one bucket drawn in the SVG chart.
type bar struct {
	X, Y, W, H     float64
	LabelX, CountY float64
	Label          string
	Count          uint64
}

// chart is the SVG geometry of a histogram, computed here so the template
// only places numbers.
type chart struct {
	Width, Height, AxisY float64
	Bars                 []bar
}

const (
	chartBarWidth = 56
	chartGap      = 12
	chartPlot     = 160 // height of the tallest bar
	chartTop      = 20  // room for the count above a bar
	chartBottom   = 24  // room for the bucket label
)

// drawChart lays out h's buckets as bars scaled to the fullest one.
func drawChart(h Histogram) chart {
	var most uint64
	for _, b := range h.Buckets {
		most = max(most, b.Count)
	}
	c := chart{
		Width:  float64(len(h.Buckets))*(chartBarWidth+chartGap) + chartGap,
		Height: chartTop + chartPlot + chartBottom,
		AxisY:  chartTop + chartPlot,
	}
	prev := 0.0
	for i, b := range h.Buckets {
		height := 0.0
		if most > 0 {
			height = chartPlot * float64(b.Count) / float64(most)
		}
		x := chartGap + float64(i)*(chartBarWidth+chartGap)
		c.Bars = append(c.Bars, bar{
			X: x, Y: c.AxisY - height, W: chartBarWidth, H: height,
			LabelX: x + chartBarWidth/2, CountY: c.AxisY - height - 6,
			Label: b.Label(prev), Count: b.Count,
		})
		prev = b.UpperBound
	}
	return c
}
