package memory

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

func vsObj(ns, name, host string) model.Config {
	return model.Config{
		Meta: model.Meta{Kind: model.KindVirtualService, Namespace: ns, Name: name},
		Spec: &networking.VirtualService{Hosts: []string{host}},
	}
}

func TestApplyAndDelete(t *testing.T) {
	s := New()
	if !s.Apply(vsObj("b", "x", "h1")) || !s.Apply(vsObj("a", "y", "h2")) {
		t.Fatal("adding new objects reported no change")
	}
	before := s.List(model.KindVirtualService)
	if len(before) != 2 || before[0].Namespace != "a" || before[1].Namespace != "b" {
		t.Fatalf("list = %+v, want a/y then b/x", before)
	}
	if s.Apply(vsObj("b", "x", "h1")) {
		t.Fatal("re-applying the same content reported a change")
	}
	if !s.Apply(vsObj("b", "x", "h3")) {
		t.Fatal("changed spec reported no change")
	}
	if got, _ := s.Get(model.KindVirtualService, "b", "x"); got.Spec.(*networking.VirtualService).Hosts[0] != "h3" {
		t.Fatalf("get = %+v, want host h3", got)
	}
	if before[1].Spec.(*networking.VirtualService).Hosts[0] != "h1" {
		t.Fatal("an earlier List result changed")
	}
	if !s.Delete(model.KindVirtualService, "a", "y") || s.Delete(model.KindVirtualService, "a", "y") {
		t.Fatal("delete: want true then false")
	}
	if !s.Delete(model.KindVirtualService, "b", "x") {
		t.Fatal("delete of the last object reported no change")
	}
	if got := s.List(model.KindVirtualService); len(got) != 0 {
		t.Fatalf("list after deleting everything = %+v", got)
	}
	// Replace still sees what Apply wrote.
	s.Apply(vsObj("a", "y", "h2"))
	if changed := s.Replace(nil); len(changed) != 1 {
		t.Fatalf("replace with nothing changed %v, want the applied object", changed)
	}
}
