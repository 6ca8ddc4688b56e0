package gateway_test

import (
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	meshconfig "istio.io/api/mesh/v1alpha1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// ingressPolicies are Istio's ingress examples: the "Ingress Access
// Control" task's ipBlocks ALLOW policy and a CUSTOM policy sending the
// gateway's requests to the ext-authz gRPC provider, both in istio-system
// selecting the ingress gateway by app label (as the task), and a
// RequestAuthentication.
func ingressPolicies() []model.Config {
	sel := &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "istio-ingressgateway"}}
	return []model.Config{
		{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "ingress-policy", Namespace: "istio-system"},
			Spec: &security.AuthorizationPolicy{Selector: sel, Rules: []*security.Rule{{From: []*security.Rule_From{{Source: &security.Source{IpBlocks: []string{"1.2.3.4", "5.6.7.0/24"}}}}}}}},
		{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "ext-authz", Namespace: "istio-system"},
			Spec: &security.AuthorizationPolicy{Selector: sel, Action: security.AuthorizationPolicy_CUSTOM,
				ActionDetail: &security.AuthorizationPolicy_Provider{Provider: &security.AuthorizationPolicy_ExtensionProvider{Name: "sample-ext-authz-grpc"}},
				Rules:        []*security.Rule{{}}}},
		{Meta: model.Meta{Kind: model.KindRequestAuthentication, Name: "ingress-jwt", Namespace: "istio-system"},
			Spec: &security.RequestAuthentication{Selector: sel, JwtRules: []*security.JWTRule{{Issuer: "testing@secure.istio.io",
				Jwks: `{"keys":[{"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}]}`}}}},
	}
}

// selectedIngress is the ingress gateway pod with the app label the
// policies select.
func selectedIngress() *model.Proxy {
	return router("istio-system", map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"})
}

func ingressInput(t *testing.T) nt.Input {
	in := nt.Bookinfo(t)
	in.Mesh = &meshconfig.MeshConfig{RootNamespace: "istio-system", ExtensionProviders: []*meshconfig.MeshConfig_ExtensionProvider{
		{Name: "sample-ext-authz-grpc", Provider: &meshconfig.MeshConfig_ExtensionProvider_EnvoyExtAuthzGrpc{
			EnvoyExtAuthzGrpc: &meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider{Service: "ratings.default.svc.cluster.local", Port: 9080}}},
	}}
	in.Configs = append(in.Configs, ingressPolicies()...)
	return in
}

// TestAuthorizationOnGateway: AuthorizationPolicies selecting the router
// apply to its HTTP servers in Istio's order (CUSTOM, jwt_authn, RBAC) and
// to its TCP servers (network CUSTOM and RBAC before tcp_proxy); a router
// they do not select gets none.
func TestAuthorizationOnGateway(t *testing.T) {
	in := ingressInput(t)
	in.Configs = append(in.Configs, nt.LoadConfigs(t, "bookinfo-networking/bookinfo-gateway.yaml", "default")...)
	push := in.PushContext()
	ls := gateway.BuildListeners(selectedIngress(), push, discard)
	if len(ls) != 1 {
		t.Fatalf("%d listeners, want the bookinfo gateway's one", len(ls))
	}
	nt.ValidateRecursively(t, ls[0])
	got := names(connManager(t, ls[0].GetFilterChains()[0]).GetHttpFilters())
	want := []string{"envoy.filters.http.rbac.custom", wellknown.HTTPExternalAuthorization, authn.JWTFilterName, wellknown.HTTPRoleBasedAccessControl}
	if len(got) < len(want)+1 || !slices.Equal(got[:len(want)], want) || got[len(got)-1] != wellknown.Router {
		t.Errorf("ingress HTTP filters %q, want %q ... router", got, want)
	}

	// Root-namespace policies apply by labels in every namespace: a router
	// without the app label gets none.
	others := gateway.BuildListeners(ingress(), push, discard)
	if len(others) != 1 {
		t.Fatalf("%d listeners for the unselected router", len(others))
	}
	for _, l := range others {
		for _, fc := range l.GetFilterChains() {
			for _, f := range connManager(t, fc).GetHttpFilters() {
				if slices.Contains(want, f.GetName()) {
					t.Errorf("router without app=istio-ingressgateway got %s", f.GetName())
				}
			}
		}
	}

	in = ingressInput(t)
	in.Configs = append(in.Configs, gatewayConfig(tcpServer(7000, "TCP")), tcpVS(tcpTo("ratings")))
	tls := gateway.BuildListeners(selectedIngress(), in.PushContext(), discard)
	if len(tls) != 1 || len(tls[0].GetFilterChains()) != 1 {
		t.Fatalf("TCP gateway listeners %v, want one chain", tls)
	}
	nt.ValidateRecursively(t, tls[0])
	var chain []string
	for _, f := range tls[0].GetFilterChains()[0].GetFilters() {
		chain = append(chain, f.GetName())
	}
	wantTCP := []string{"envoy.filters.network.rbac.custom", wellknown.ExternalAuthorization, wellknown.RoleBasedAccessControl, wellknown.TCPProxy}
	if !slices.Equal(chain, wantTCP) {
		t.Errorf("TCP chain filters %q, want %q", chain, wantTCP)
	}
}

// TestAuthorizationPolicyChangeRebuildsCachedListeners: the cached gateway
// listeners depend on AuthorizationPolicies, so adding one that selects
// the router makes new listeners carrying its RBAC filter.
func TestAuthorizationPolicyChangeRebuildsCachedListeners(t *testing.T) {
	in, _ := cachedBookinfo(t)
	env := in.Environment()
	push := model.NewPushContext(env, nil, nil)
	p := pod("ingress-a", "10.244.1.1")
	before := generate(t, p, push)

	policy := model.Config{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "deny-all", Namespace: "istio-system"},
		Spec: &security.AuthorizationPolicy{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"istio": "ingressgateway"}},
			Action: security.AuthorizationPolicy_DENY, Rules: []*security.Rule{{}}}}
	in.Configs = append(in.Configs, policy)
	env.ConfigStore = nt.NewConfigStore(in.Configs)
	req := model.NewPushRequest(true, model.ReasonConfigUpdate, model.ConfigKey{Kind: model.KindAuthorizationPolicy, Name: "deny-all", Namespace: "istio-system"})
	in.Cache.Invalidate(req)
	push = model.NewPushContext(env, push, req)
	after := generate(t, p, push)
	if sameEntries(before.lds, after.lds) {
		t.Fatal("an AuthorizationPolicy change kept the cached gateway listeners")
	}
	found := false
	for _, r := range after.lds {
		var l listenerv3.Listener
		if err := r.GetResource().UnmarshalTo(&l); err != nil {
			t.Fatal(err)
		}
		for _, fc := range l.GetFilterChains() {
			if nt.MainFilter(fc).GetName() == "envoy.filters.network.rbac.deny" {
				found = true
			}
			if nt.MainFilter(fc).GetName() == wellknown.HTTPConnectionManager &&
				slices.Contains(names(connManager(t, fc).GetHttpFilters()), "envoy.filters.http.rbac.deny") {
				found = true
			}
		}
	}
	if !found {
		t.Error("the rebuilt listeners lack the DENY RBAC filter")
	}
}
