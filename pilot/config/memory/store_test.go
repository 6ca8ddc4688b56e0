package memory

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

func vs(ns, name string, hosts ...string) model.Config {
	return model.Config{
		Meta: model.Meta{Kind: model.KindVirtualService, Namespace: ns, Name: name},
		Spec: &networking.VirtualService{Hosts: hosts},
	}
}

func dr(ns, name, host string) model.Config {
	return model.Config{
		Meta: model.Meta{Kind: model.KindDestinationRule, Namespace: ns, Name: name},
		Spec: &networking.DestinationRule{Host: host},
	}
}

func names(cs []model.Config) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Namespace+"/"+c.Name)
	}
	return out
}

func key(kind model.Kind, ns, name string) model.ConfigKey {
	return model.ConfigKey{Kind: kind, Namespace: ns, Name: name}
}

func TestStoreListSorted(t *testing.T) {
	s := New()
	got := s.Replace([]model.Config{vs("b", "x", "x"), vs("a", "z", "z"), vs("a", "y", "y"), dr("a", "r", "r")})
	want := []model.ConfigKey{
		key(model.KindDestinationRule, "a", "r"),
		key(model.KindVirtualService, "a", "y"),
		key(model.KindVirtualService, "a", "z"),
		key(model.KindVirtualService, "b", "x"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Replace keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a/y", "a/z", "b/x"}, names(s.List(model.KindVirtualService))); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if got := s.List(model.KindGateway); len(got) != 0 {
		t.Errorf("List(Gateway) = %v, want empty", names(got))
	}
	if c, ok := s.Get(model.KindDestinationRule, "a", "r"); !ok || c.Spec.(*networking.DestinationRule).GetHost() != "r" {
		t.Errorf("Get(a/r) = %v, %v", c, ok)
	}
	if _, ok := s.Get(model.KindDestinationRule, "a", "missing"); ok {
		t.Error("Get(a/missing) found an object")
	}
}

func TestStoreReplaceReportsChanges(t *testing.T) {
	s := New()
	s.Replace([]model.Config{vs("ns", "keep", "a"), vs("ns", "edit", "b"), vs("ns", "drop", "c"), dr("ns", "rule", "d")})
	before := s.List(model.KindVirtualService)
	beforeDR := s.List(model.KindDestinationRule)
	keepSpec := before[2].Spec // ns/keep

	labelled := vs("ns", "rule-less", "e")
	labelled.Labels = map[string]string{"app": "x"}
	got := s.Replace([]model.Config{
		vs("ns", "keep", "a"), // equal content, new value
		vs("ns", "edit", "b2"),
		labelled,
		dr("ns", "rule", "d"),
	})
	want := []model.ConfigKey{
		key(model.KindVirtualService, "ns", "drop"),
		key(model.KindVirtualService, "ns", "edit"),
		key(model.KindVirtualService, "ns", "rule-less"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Replace keys (-want +got):\n%s", diff)
	}
	after := s.List(model.KindVirtualService)
	if diff := cmp.Diff([]string{"ns/edit", "ns/keep", "ns/rule-less"}, names(after)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if after[1].Spec != keepSpec {
		t.Error("unchanged object got a new Spec pointer")
	}
	if &before[0] == &after[0] {
		t.Error("List of a changed kind returned the old slice")
	}
	if afterDR := s.List(model.KindDestinationRule); &afterDR[0] != &beforeDR[0] {
		t.Error("List of an unchanged kind was rebuilt")
	}
	// The earlier slice is a snapshot: later writes do not change it.
	if diff := cmp.Diff([]string{"ns/drop", "ns/edit", "ns/keep"}, names(before)); diff != "" {
		t.Errorf("old List result changed (-want +got):\n%s", diff)
	}

	// A label change alone is a change.
	relabelled := vs("ns", "rule-less", "e")
	relabelled.Labels = map[string]string{"app": "y"}
	got = s.Replace([]model.Config{vs("ns", "keep", "a"), vs("ns", "edit", "b2"), relabelled, dr("ns", "rule", "d")})
	if diff := cmp.Diff([]model.ConfigKey{key(model.KindVirtualService, "ns", "rule-less")}, got); diff != "" {
		t.Errorf("label change keys (-want +got):\n%s", diff)
	}

	// Replacing with nothing removes everything.
	got = s.Replace(nil)
	if len(got) != 4 {
		t.Errorf("Replace(nil) = %v, want 4 removals", got)
	}
	if l := s.List(model.KindDestinationRule); len(l) != 0 {
		t.Errorf("List after Replace(nil) = %v", names(l))
	}
}

func TestStoreReplaceDuplicateKeysLastWins(t *testing.T) {
	s := New()
	got := s.Replace([]model.Config{vs("ns", "a", "first"), vs("ns", "a", "second")})
	if len(got) != 1 {
		t.Errorf("Replace keys = %v, want one", got)
	}
	l := s.List(model.KindVirtualService)
	if len(l) != 1 || l[0].Spec.(*networking.VirtualService).GetHosts()[0] != "second" {
		t.Errorf("List = %v, want the second object", l)
	}
}

func TestStoreConcurrent(t *testing.T) {
	s := New()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				s.Replace([]model.Config{vs("ns", fmt.Sprintf("vs-%d-%d", w, i), "h")})
			}
		})
		wg.Go(func() {
			for range 50 {
				for _, c := range s.List(model.KindVirtualService) {
					if c.Spec == nil {
						t.Error("nil spec")
					}
				}
			}
		})
	}
	wg.Wait()
	if got := len(s.List(model.KindVirtualService)); got != 1 {
		t.Errorf("after concurrent Replace: %d objects, want 1", got)
	}
}
