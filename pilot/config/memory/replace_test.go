package memory

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// TestReplaceSortedMatchesUnsorted feeds two stores the same random rounds
// of configs, one sorted (the merge path) and one shuffled (the map path),
// and checks they report the same changes and hold the same values (Spec
// pointers included: both keep an unchanged object's previous value).
func TestReplaceSortedMatchesUnsorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 25))
	kinds := []model.Kind{model.KindDestinationRule, model.KindServiceEntry, model.KindVirtualService}
	merged, mapped := New(), New()
	var prev []model.Config
	for round := range 400 {
		var next []model.Config
		// Keep, re-create with equal content, or edit previous objects.
		for _, c := range prev {
			switch r := rng.IntN(20); {
			case r == 0: // dropped
			case r == 1:
				c.Spec = &networking.VirtualService{Hosts: []string{fmt.Sprintf("h%d", rng.IntN(3))}}
				next = append(next, c)
			case r == 2:
				c.Labels = map[string]string{"v": fmt.Sprint(rng.IntN(2))}
				next = append(next, c)
			case r == 3:
				if vs, ok := c.Spec.(*networking.VirtualService); ok {
					c.Spec = &networking.VirtualService{Hosts: slices.Clone(vs.Hosts)}
				}
				next = append(next, c)
			default:
				next = append(next, c)
			}
		}
		for range rng.IntN(6) {
			next = append(next, model.Config{
				Meta: model.Meta{Kind: kinds[rng.IntN(len(kinds))], Namespace: fmt.Sprintf("ns%d", rng.IntN(3)), Name: fmt.Sprintf("n%d", rng.IntN(20))},
				Spec: &networking.VirtualService{Hosts: []string{fmt.Sprintf("h%d", rng.IntN(3))}},
			})
		}
		// Unique keys, last wins, sorted (as a file snapshot).
		last := map[model.ConfigKey]model.Config{}
		for _, c := range next {
			last[c.Key()] = c
		}
		next = next[:0]
		for _, c := range last {
			next = append(next, c)
		}
		slices.SortFunc(next, func(a, b model.Config) int { return a.Key().Compare(b.Key()) })
		shuffled := slices.Clone(next)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if rng.IntN(10) == 0 && len(next) > 0 {
			// An Apply between reloads, on both stores.
			c := next[rng.IntN(len(next))]
			c.Spec = &networking.VirtualService{Hosts: []string{"applied"}}
			if merged.Apply(c) != mapped.Apply(c) {
				t.Fatalf("round %d: Apply disagrees", round)
			}
		}
		got, want := merged.Replace(next), mapped.Replace(shuffled)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("round %d: changed keys (-map +merge):\n%s", round, diff)
		}
		for _, kind := range kinds {
			a, b := merged.List(kind), mapped.List(kind)
			if len(a) != len(b) {
				t.Fatalf("round %d: %s: %d objects, want %d", round, kind, len(a), len(b))
			}
			for i := range a {
				if a[i].Key() != b[i].Key() || a[i].Spec != b[i].Spec {
					t.Fatalf("round %d: %s[%d] = %s, want %s (or another Spec)", round, kind, i, a[i].Key(), b[i].Key())
				}
				if g, ok := merged.Get(kind, a[i].Namespace, a[i].Name); !ok || g.Spec != a[i].Spec {
					t.Fatalf("round %d: Get(%s) disagrees with List", round, a[i].Key())
				}
			}
		}
		prev = next
	}
}
