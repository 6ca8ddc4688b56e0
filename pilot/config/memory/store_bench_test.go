package memory

import (
	"fmt"
	"slices"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// BenchmarkReplaceOneChange measures Replace of 30k ServiceEntries and
// 30k WorkloadEntries of which one ServiceEntry is new each time (a file
// source's reload after one change).
func BenchmarkReplaceOneChange(b *testing.B) {
	base := tripcomConfigs(30000)
	s := New()
	s.Replace(base)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		marker := markerEntry(i)
		if changed := s.Replace(append(base[:len(base):len(base)], marker)); len(changed) == 0 {
			b.Fatal("no change")
		}
	}
}

// BenchmarkReplaceOneChangeSorted is BenchmarkReplaceOneChange with the
// configs sorted by kind, namespace and name, as a file snapshot gives them.
func BenchmarkReplaceOneChangeSorted(b *testing.B) {
	base := tripcomConfigs(30000)
	sortConfigs := func(cs []model.Config) []model.Config {
		slices.SortFunc(cs, func(a, b model.Config) int { return a.Key().Compare(b.Key()) })
		return cs
	}
	sortConfigs(base)
	s := New()
	s.Replace(base)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		marker := markerEntry(i)
		b.StopTimer()
		next := sortConfigs(append(slices.Clone(base), marker))
		b.StartTimer()
		if changed := s.Replace(next); len(changed) == 0 {
			b.Fatal("no change")
		}
	}
}

// tripcomConfigs returns n ServiceEntries and n WorkloadEntries over 100
// namespaces (Trip.com's shape), interleaved.
func tripcomConfigs(n int) []model.Config {
	base := make([]model.Config, 0, 2*n+1)
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i%100)
		base = append(base,
			model.Config{Meta: model.Meta{Kind: model.KindServiceEntry, Namespace: ns, Name: fmt.Sprintf("svc-%d", i)},
				Spec: &networking.ServiceEntry{Hosts: []string{fmt.Sprintf("svc-%d.example.com", i)}}},
			model.Config{Meta: model.Meta{Kind: model.KindWorkloadEntry, Namespace: ns, Name: fmt.Sprintf("svc-%d", i)},
				Spec: &networking.WorkloadEntry{Address: "10.0.0.1"}})
	}
	return base
}

// markerEntry is the i-th new ServiceEntry of a change.
func markerEntry(i int) model.Config {
	return model.Config{Meta: model.Meta{Kind: model.KindServiceEntry, Namespace: "load-markers", Name: fmt.Sprintf("marker-%d", i)},
		Spec: &networking.ServiceEntry{Hosts: []string{fmt.Sprintf("marker-%d.example.com", i)}}}
}
