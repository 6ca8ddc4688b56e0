package preview

import (
	"testing"

	"github.com/meshpilot/meshpilot/model"
)

type listStore map[model.Kind][]model.Config

func (s listStore) List(k model.Kind) []model.Config { return s[k] }

func cfg(kind model.Kind, ns, name, rv string) model.Config {
	return model.Config{Meta: model.Meta{Kind: kind, Namespace: ns, Name: name, ResourceVersion: rv}}
}

// TestOverlay: the overlay replaces, adds and deletes objects of the kinds
// the change touches, keeps the store's order (namespace, name), returns
// other kinds untouched, and never writes to the base store.
func TestOverlay(t *testing.T) {
	vs := model.KindVirtualService
	base := listStore{
		vs:                        {cfg(vs, "a", "x", "1"), cfg(vs, "b", "y", "1"), cfg(vs, "c", "z", "1")},
		model.KindDestinationRule: {cfg(model.KindDestinationRule, "a", "d", "1")},
	}
	o := &overlay{base: base,
		put: map[model.ConfigKey]model.Config{
			{Kind: vs, Namespace: "b", Name: "y"}:  cfg(vs, "b", "y", "2"),
			{Kind: vs, Namespace: "a", Name: "w"}:  cfg(vs, "a", "w", "new"),
			{Kind: vs, Namespace: "d", Name: "zz"}: cfg(vs, "d", "zz", "new"),
		},
		deleted: map[model.ConfigKey]bool{{Kind: vs, Namespace: "c", Name: "z"}: true},
	}
	var got []string
	for _, c := range o.List(vs) {
		got = append(got, c.Namespace+"/"+c.Name+"@"+c.ResourceVersion)
	}
	want := []string{"a/w@new", "a/x@1", "b/y@2", "d/zz@new"}
	if len(got) != len(want) {
		t.Fatalf("List: %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("List: %v, want %v", got, want)
		}
	}
	if dr := o.List(model.KindDestinationRule); len(dr) != 1 || dr[0].Name != "d" {
		t.Errorf("untouched kind: %+v", dr)
	}
	if len(base[vs]) != 3 || base[vs][1].ResourceVersion != "1" || base[vs][2].Name != "z" {
		t.Errorf("base store changed: %+v", base[vs])
	}
}
