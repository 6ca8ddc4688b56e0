package gateway_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/pilot/config/gateway"
)

// TestRuleMemoSameOutput: with a RuleMemo kept between translations, as
// the controller keeps it while only HTTPRoutes change, each translation
// equals one made from scratch: after a route is replaced by a new
// generation, one is replaced by a copy (a status write), one added and
// one deleted; for routes from an API server (uid and generation) and
// for routes without them (kept per object).
func TestRuleMemoSameOutput(t *testing.T) {
	for _, versioned := range []bool{true, false} {
		t.Run(fmt.Sprint("versioned=", versioned), func(t *testing.T) {
			in := routesInput(20)
			if versioned {
				for i, r := range in.HTTPRoutes {
					r.UID, r.Generation = types.UID(fmt.Sprint("uid-", i)), 1
				}
			}
			memo := &gateway.RuleMemo{}
			check := func(step string) {
				t.Helper()
				withMemo := in
				withMemo.Rules = memo
				got, want := gateway.Translate(withMemo), gateway.Translate(in)
				if !equality.Semantic.DeepEqual(got.HTTPRoutes, want.HTTPRoutes) || !equality.Semantic.DeepEqual(got.Gateways, want.Gateways) {
					t.Fatalf("%s: status differs from a translation from scratch", step)
				}
				if len(got.Configs) != len(want.Configs) {
					t.Fatalf("%s: %d configs, want %d", step, len(got.Configs), len(want.Configs))
				}
				for i := range got.Configs {
					g, w := got.Configs[i], want.Configs[i]
					if g.Key() != w.Key() || !proto.Equal(g.Spec, w.Spec) {
						t.Fatalf("%s: config %v differs from %v", step, g.Key(), w.Key())
					}
				}
			}
			check("first")
			check("unchanged")
			// r3 changed (a new object, its generation bumped), r7
			// copied as a status write leaves it, r20 added, r5
			// deleted.
			r3 := benchRoute("default", "r3")
			r3.UID, r3.Generation = in.HTTPRoutes[3].UID, in.HTTPRoutes[3].Generation+1
			r3.Spec.Rules[0].Matches[0].Path.Value = ptr("/elsewhere")
			r3.Spec.Rules[0].BackendRefs[0].Name = "missing"
			in.HTTPRoutes[3] = r3
			in.HTTPRoutes[7] = in.HTTPRoutes[7].DeepCopy()
			in.HTTPRoutes = append(in.HTTPRoutes, benchRoute("default", "r20"))
			in.HTTPRoutes = append(in.HTTPRoutes[:5], in.HTTPRoutes[6:]...)
			check("changed")
			withMemo := in
			withMemo.Rules = memo
			st := gateway.Translate(withMemo).HTTPRoutes[types.NamespacedName{Namespace: "default", Name: "r3"}]
			if got := st.Parents[0].Conditions[1].Reason; got != string(gwv1.RouteReasonBackendNotFound) {
				t.Errorf("changed route r3: ResolvedRefs reason %s, want BackendNotFound", got)
			}
		})
	}
}

// BenchmarkTranslate1000RoutesOneChanged is a translation after one of
// 1,000 HTTPRoutes changed, with the controller's RuleMemo (the rules of
// the other 999 kept), against BenchmarkTranslate1000Routes from scratch.
func BenchmarkTranslate1000RoutesOneChanged(b *testing.B) {
	in := routesInput(1000)
	in.Rules = &gateway.RuleMemo{}
	gateway.Translate(in)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		in.HTTPRoutes[i%1000] = benchRoute("default", fmt.Sprintf("r%d", i%1000))
		if out := gateway.Translate(in); len(out.HTTPRoutes) != 1000 {
			b.Fatalf("%d routes with status", len(out.HTTPRoutes))
		}
	}
}
