// Package stats summarises samples of durations for pilot-load's reports:
// nearest-rank percentiles, maximum and median.
package stats

import (
	"math"
	"slices"
	"time"
)

// Summary describes a set of durations. Times are in milliseconds so the
// JSON report reads without unit conversion.
type Summary struct {
	// Count is the number of samples.
	Count int `json:"count"`
	// P50Ms, P90Ms and P99Ms are nearest-rank percentiles in milliseconds.
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	// MaxMs is the largest sample in milliseconds.
	MaxMs float64 `json:"max_ms"`
}

// Summarize returns the summary of samples; it does not modify them. An
// empty set yields a zero Summary.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return Summary{
		Count: len(s),
		P50Ms: Millis(Percentile(s, 50)),
		P90Ms: Millis(Percentile(s, 90)),
		P99Ms: Millis(Percentile(s, 99)),
		MaxMs: Millis(s[len(s)-1]),
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest sample such that at least p% of samples are <= it.
// sorted must be in ascending order; an empty slice yields 0.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Median returns the nearest-rank median of values (which it does not
// modify); an empty slice yields 0.
func Median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	rank := int(math.Ceil(0.5 * float64(len(s))))
	return s[max(rank, 1)-1]
}

// Millis converts d to fractional milliseconds.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
