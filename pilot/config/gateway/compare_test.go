package gateway_test

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// TestSameRoutesAsIstio checks that Gateway API objects and the Istio
// Gateway and VirtualService a user would write for them give the gateway
// proxy the same HTTP routes, the same listener and the same clusters.
func TestSameRoutesAsIstio(t *testing.T) {
	proxy := gatewayProxy("default", "bookinfo")

	api := nt.Bookinfo(t)
	in := readInput(t, "testdata/bookinfo.yaml")
	in.Service = serviceLookup(api.Services)
	api.Configs = append(api.Configs, gateway.Translate(in).Configs...)
	fromAPI := generate(t, proxy, api.PushContext())

	istio := nt.Bookinfo(t)
	istio.Configs = append(istio.Configs, nt.LoadConfigs(t, mustAbs(t, "testdata/istio/bookinfo.yaml"), "default")...)
	fromIstio := generate(t, proxy, istio.PushContext())

	want, got := fromIstio.routes["http.80"], fromAPI.routes["http.80"]
	if want == nil || got == nil {
		t.Fatalf("route http.80: from Istio %v, from Gateway API %v", want != nil, got != nil)
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("route http.80 differs (-istio +gateway api):\n%s", d)
	}
	if d := cmp.Diff(fromIstio.listeners[0], fromAPI.listeners[0], protocmp.Transform()); d != "" {
		t.Errorf("listener 0.0.0.0_80 differs (-istio +gateway api):\n%s", d)
	}
	if d := cmp.Diff(fromIstio.clusters, fromAPI.clusters, protocmp.Transform()); d != "" {
		t.Errorf("clusters differ (-istio +gateway api):\n%s", d)
	}
}

// TestSameRoutesAsIstioAllKinds checks the same for every listener
// protocol and route kind (testdata/routekinds.yaml and its Istio
// equivalent): HTTP with an HTTPRoute and a GRPCRoute, HTTPS, TLS
// Passthrough, TLS Terminate and TCP give the same listeners, routes and
// clusters.
func TestSameRoutesAsIstioAllKinds(t *testing.T) {
	proxy := gatewayProxy("default", "bookinfo")

	api := nt.Bookinfo(t)
	in := readInput(t, "testdata/routekinds.yaml")
	in.Service = serviceLookup(api.Services)
	api.Configs = append(api.Configs, gateway.Translate(in).Configs...)
	fromAPI := generate(t, proxy, api.PushContext())

	istio := nt.Bookinfo(t)
	istio.Configs = append(istio.Configs, nt.LoadConfigs(t, mustAbs(t, "testdata/istio/routekinds.yaml"), "default")...)
	fromIstio := generate(t, proxy, istio.PushContext())

	if len(fromIstio.listeners) != 5 || len(fromIstio.routes) != 2 {
		t.Fatalf("from Istio: %d listeners and %d route configurations, want 5 and 2", len(fromIstio.listeners), len(fromIstio.routes))
	}
	if d := cmp.Diff(fromIstio.listeners, fromAPI.listeners, protocmp.Transform()); d != "" {
		t.Errorf("listeners differ (-istio +gateway api):\n%s", d)
	}
	if d := cmp.Diff(fromIstio.routes, fromAPI.routes, protocmp.Transform()); d != "" {
		t.Errorf("routes differ (-istio +gateway api):\n%s", d)
	}
	if d := cmp.Diff(fromIstio.clusters, fromAPI.clusters, protocmp.Transform()); d != "" {
		t.Errorf("clusters differ (-istio +gateway api):\n%s", d)
	}
}

// TestBackendTLSSameAsIstio checks that the accepted BackendTLSPolicies of
// testdata/backendtls.yaml give the gateway proxy the clusters that the
// DestinationRules a user would write in Istio (testdata/istio/
// backendtls.yaml) give it: the same TLS origination, merged the same way
// with Bookinfo's own DestinationRules (their subsets keep the policy's TLS).
func TestBackendTLSSameAsIstio(t *testing.T) {
	proxy := gatewayProxy("default", "bookinfo")
	in := readInput(t, "testdata/backendtls.yaml")
	in.ConfigMapCA = configMapCA
	in.BackendTLSPolicies = slices.DeleteFunc(in.BackendTLSPolicies, func(p *gwv1.BackendTLSPolicy) bool {
		return p.Name != "reviews-tls" && p.Name != "ratings-port"
	})

	api := nt.Bookinfo(t)
	in.Service = serviceLookup(api.Services)
	api.Configs = append(api.Configs, gateway.Translate(in).Configs...)
	fromAPI := generate(t, proxy, api.PushContext())

	istio := nt.Bookinfo(t)
	in.BackendTLSPolicies = nil
	istio.Configs = append(istio.Configs, gateway.Translate(in).Configs...)
	istio.Configs = append(istio.Configs, nt.LoadConfigs(t, mustAbs(t, "testdata/istio/backendtls.yaml"), "default")...)
	fromIstio := generate(t, proxy, istio.PushContext())

	tlsClusters := 0
	for _, c := range fromAPI.clusters {
		if c.GetTransportSocket() != nil {
			tlsClusters++
		}
	}
	// reviews (3 subsets and the service), ratings (4 subsets and the service).
	if tlsClusters != 9 {
		t.Errorf("%d clusters with TLS, want 9", tlsClusters)
	}
	if d := cmp.Diff(fromIstio.clusters, fromAPI.clusters, protocmp.Transform()); d != "" {
		t.Errorf("clusters differ (-istio +gateway api):\n%s", d)
	}
}
