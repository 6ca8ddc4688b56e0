package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
)

// ourParents renders the conditions our controller wrote on a route.
func ourParents(st gwv1.RouteStatus) string {
	var out []string
	for _, p := range st.Parents {
		if p.ControllerName == gateway.ControllerName {
			out = append(out, conditions(p.Conditions))
		}
	}
	return strings.Join(out, "; ")
}

// TestRouteKindsOnAPIServer creates a Gateway with HTTP, TLS Passthrough
// and TCP listeners and one GRPCRoute, TLSRoute, TCPRoute and UDPRoute on
// a real API server with the chart's CRDs: the controller watches the
// four kinds, writes each route's status and the listeners'
// attachedRoutes, and puts their VirtualServices in the store.
func TestRouteKindsOnAPIServer(t *testing.T) {
	client, store, _ := startController(t)
	ctx := t.Context()
	v1 := client.GatewayV1()
	createIstioClass(t, v1)
	passthrough := gwv1.TLSModePassthrough
	if _, err := v1.Gateways("default").Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gw"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: []gwv1.Listener{
			{Name: "web", Port: 80, Protocol: gwv1.HTTPProtocolType},
			{Name: "tls", Port: 443, Protocol: gwv1.TLSProtocolType, Hostname: ptr(gwv1.Hostname("*.example.com")),
				TLS: &gwv1.ListenerTLSConfig{Mode: &passthrough}},
			{Name: "tcp", Port: 9000, Protocol: gwv1.TCPProtocolType},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	parent := func(section string) gwv1.CommonRouteSpec {
		return gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw", SectionName: ptr(gwv1.SectionName(section))}}}
	}
	backend := func(name string) gwv1.BackendRef {
		return gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: ptr(gwv1.PortNumber(8080))}}
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "default", Name: name} }
	if _, err := v1.GRPCRoutes("default").Create(ctx, &gwv1.GRPCRoute{ObjectMeta: meta("grpc"), Spec: gwv1.GRPCRouteSpec{
		CommonRouteSpec: parent("web"),
		Rules: []gwv1.GRPCRouteRule{{
			Matches:     []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Service: ptr("echo.Echo"), Method: ptr("Say")}}},
			BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: backend("web")}},
		}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v1.TLSRoutes("default").Create(ctx, &gwv1.TLSRoute{ObjectMeta: meta("tls"), Spec: gwv1.TLSRouteSpec{
		CommonRouteSpec: parent("tls"), Hostnames: []gwv1.Hostname{"db.example.com"},
		Rules: []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{backend("web")}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v1.TCPRoutes("default").Create(ctx, &gwv1.TCPRoute{ObjectMeta: meta("tcp"), Spec: gwv1.TCPRouteSpec{
		CommonRouteSpec: parent("tcp"),
		Rules:           []gwv1.TCPRouteRule{{BackendRefs: []gwv1.BackendRef{backend("missing")}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v1.UDPRoutes("default").Create(ctx, &gwv1.UDPRoute{ObjectMeta: meta("udp"), Spec: gwv1.UDPRouteSpec{
		CommonRouteSpec: parent("tcp"),
		Rules:           []gwv1.UDPRouteRule{{BackendRefs: []gwv1.BackendRef{backend("web")}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	accepted := "Accepted=True/Accepted ResolvedRefs=True/ResolvedRefs"
	watchUntil(t, "GRPCRoute", func(ctx context.Context) (watch.Interface, error) {
		return v1.GRPCRoutes("default").Watch(ctx, anyVersion)
	}, "grpc", func(r *gwv1.GRPCRoute) string { return want(ourParents(r.Status.RouteStatus), accepted) })
	watchUntil(t, "TLSRoute", func(ctx context.Context) (watch.Interface, error) {
		return v1.TLSRoutes("default").Watch(ctx, anyVersion)
	}, "tls", func(r *gwv1.TLSRoute) string { return want(ourParents(r.Status.RouteStatus), accepted) })
	watchUntil(t, "TCPRoute", func(ctx context.Context) (watch.Interface, error) {
		return v1.TCPRoutes("default").Watch(ctx, anyVersion)
	}, "tcp", func(r *gwv1.TCPRoute) string {
		return want(ourParents(r.Status.RouteStatus), "Accepted=True/Accepted ResolvedRefs=False/BackendNotFound")
	})
	watchUntil(t, "UDPRoute", func(ctx context.Context) (watch.Interface, error) {
		return v1.UDPRoutes("default").Watch(ctx, anyVersion)
	}, "udp", func(r *gwv1.UDPRoute) string {
		return want(ourParents(r.Status.RouteStatus), "Accepted=False/UnsupportedValue ResolvedRefs=True/ResolvedRefs")
	})
	watchUntil(t, "Gateway", func(ctx context.Context) (watch.Interface, error) {
		return v1.Gateways("default").Watch(ctx, anyVersion)
	}, "gw", func(g *gwv1.Gateway) string {
		var got []string
		for _, l := range g.Status.Listeners {
			var kinds []string
			for _, k := range l.SupportedKinds {
				kinds = append(kinds, string(k.Kind))
			}
			got = append(got, fmt.Sprintf("%s:%d:%s", l.Name, l.AttachedRoutes, strings.Join(kinds, ",")))
		}
		// The TCPRoute's only backend is missing: it attaches, with no
		// tcp route.
		return want(strings.Join(got, " "), "web:1:HTTPRoute,GRPCRoute tls:1:TLSRoute tcp:1:TCPRoute")
	})
	for _, name := range []string{"gw-istio-autogenerated-k8s-gateway-web-wildcard", "gw-istio-autogenerated-k8s-gateway-tls-db.example.com"} {
		if _, ok := store.Get(model.KindVirtualService, "default", name); !ok {
			t.Errorf("store has no VirtualService default/%s", name)
		}
	}
}
