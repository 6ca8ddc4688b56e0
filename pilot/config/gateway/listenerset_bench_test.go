package gateway_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/pilot/config/gateway"
)

// listenerSetsInput is routesInput's Gateway (one listener) taking sets of
// its namespace, with sets ListenerSets of perSet HTTP listeners each (one
// port per listener) and one HTTPRoute per set listener, parented to the
// set. inline instead declares the same listeners on the Gateway itself,
// the routes parented to it: the same servers without sets.
func listenerSetsInput(sets, perSet int, inline bool) gateway.Input {
	in := routesInput(0)
	gw := in.Gateways[0]
	same := gwv1.NamespacesFromSame
	gw.Spec.AllowedListeners = &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &same}}
	for s := range sets {
		ls := &gwv1.ListenerSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("set%d", s)},
			Spec:       gwv1.ListenerSetSpec{ParentRef: gwv1.ParentGatewayReference{Name: "gw"}},
		}
		for l := range perSet {
			name := gwv1.SectionName(fmt.Sprintf("s%dl%d", s, l))
			port := gwv1.PortNumber(10000 + s*perSet + l)
			if inline {
				gw.Spec.Listeners = append(gw.Spec.Listeners, gwv1.Listener{Name: name, Port: port, Protocol: gwv1.HTTPProtocolType})
			} else {
				ls.Spec.Listeners = append(ls.Spec.Listeners, gwv1.ListenerEntry{Name: name, Port: port, Protocol: gwv1.HTTPProtocolType})
			}
			r := benchRoute("default", string(name))
			if inline {
				r.Spec.ParentRefs[0].SectionName = &name
			} else {
				r.Spec.ParentRefs[0] = gwv1.ParentReference{Group: ptr(gwv1.Group(gateway.Group)), Kind: ptr(gwv1.Kind(gateway.KindListenerSet)),
					Name: gwv1.ObjectName(ls.Name), SectionName: &name}
			}
			in.HTTPRoutes = append(in.HTTPRoutes, r)
		}
		if !inline {
			in.ListenerSets = append(in.ListenerSets, ls)
		}
	}
	return in
}

// BenchmarkTranslateListenerSets is one translation of a Gateway with 100
// ListenerSets of 4 listeners, a route on each (400 routes); Inline has the
// same 400 listeners on the Gateway; Flood has 1,000 sets of 64 listeners
// (64,000, past MaxListenersPerGateway) and no routes.
func BenchmarkTranslateListenerSets(b *testing.B) {
	for _, c := range []struct {
		name           string
		sets, perSet   int
		inline, routes bool
	}{
		{"Sets100x4", 100, 4, false, true},
		{"Inline400", 100, 4, true, true},
		{"Flood1000x64", 1000, 64, false, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			in := listenerSetsInput(c.sets, c.perSet, c.inline)
			if !c.routes {
				in.HTTPRoutes = nil
			}
			b.ReportAllocs()
			for b.Loop() {
				out := gateway.Translate(in)
				if !c.inline && len(out.ListenerSets) != c.sets {
					b.Fatalf("%d sets with status", len(out.ListenerSets))
				}
			}
		})
	}
}
