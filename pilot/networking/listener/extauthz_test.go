package listener_test

import (
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// extAuthzMesh holds the providers of Istio's External Authorization task.
func extAuthzMesh() *meshconfig.MeshConfig {
	return &meshconfig.MeshConfig{RootNamespace: "istio-system", ExtensionProviders: []*meshconfig.MeshConfig_ExtensionProvider{
		{Name: "sample-ext-authz-grpc", Provider: &meshconfig.MeshConfig_ExtensionProvider_EnvoyExtAuthzGrpc{
			EnvoyExtAuthzGrpc: &meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider{Service: "ext-authz.foo.svc.cluster.local", Port: 9000}}},
		{Name: "sample-ext-authz-http", Provider: &meshconfig.MeshConfig_ExtensionProvider_EnvoyExtAuthzHttp{
			EnvoyExtAuthzHttp: &meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{Service: "ext-authz.foo.svc.cluster.local", Port: 8000, IncludeRequestHeadersInCheck: []string{"x-ext-authz"}}}},
	}}
}

var extAuthzService = &model.Service{Hostname: "ext-authz.foo.svc.cluster.local", Name: "ext-authz", Namespace: "foo", Address: "10.0.0.50",
	Ports: []model.Port{{Name: "http", Port: 8000, Protocol: model.ProtocolHTTP}, {Name: "grpc", Port: 9000, Protocol: model.ProtocolGRPC}}}

// customPolicy is the task's CUSTOM policy on /headers, for app in ns.
func customPolicy(ns, app, provider string) string {
	return `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: ext-authz
  namespace: ` + ns + `
spec:
  selector:
    matchLabels:
      app: ` + app + `
  action: CUSTOM
  provider:
    name: ` + provider + `
  rules:
  - to:
    - operation:
        paths: ["/headers"]
`
}

func httpFilterNames(t *testing.T, l map[string]*listenerv3.Listener, port uint32) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for name, fc := range chainsFor(l[listener.VirtualInbound], port) {
		if nt.MainFilter(fc).GetName() != wellknown.HTTPConnectionManager {
			continue // a rejecting chain (BlackHole)
		}
		for _, f := range nt.WithoutTelemetry(hcm(t, nt.MainFilter(fc)).GetHttpFilters()) {
			out[name] = append(out[name], f.GetName())
		}
	}
	if len(out) == 0 {
		t.Fatalf("no chain for port %d", port)
	}
	return out
}

// TestInboundExtAuthzOrder: Istio's order in an inbound HTTP connection
// manager is CUSTOM (shadow RBAC, ext_authz), jwt_authn, then the AUDIT,
// DENY and ALLOW RBAC filters, then the router; a TCP chain has the CUSTOM
// network filters (gRPC provider) before the network RBAC filters.
func TestInboundExtAuthzOrder(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Mesh = extAuthzMesh()
	in.Services = append(in.Services, extAuthzService)
	in.Configs = append(in.Configs, loadSecurity(t, productpageJWT+"---\n"+customPolicy("default", "productpage", "sample-ext-authz-grpc"))...)

	want := []string{"envoy.filters.http.rbac.custom", wellknown.HTTPExternalAuthorization, authn.JWTFilterName,
		"envoy.filters.http.rbac.audit", "envoy.filters.http.rbac.deny", wellknown.HTTPRoleBasedAccessControl}
	for name, got := range httpFilterNames(t, build(t, in, nt.BookinfoProxy("productpage-v1")), 9080) {
		if len(got) < len(want)+1 || !slices.Equal(got[:len(want)], want) || got[len(got)-1] != wellknown.Router {
			t.Errorf("chain %s http filters %q, want %q ... router", name, got, want)
		}
	}

	// reviews is not selected: no ext_authz there.
	for name, got := range httpFilterNames(t, build(t, in, nt.BookinfoProxy("reviews-v1")), 9080) {
		if slices.Contains(got, wellknown.HTTPExternalAuthorization) {
			t.Errorf("reviews chain %s has ext_authz: %q", name, got)
		}
	}

	std := nt.Standard()
	std.Mesh = extAuthzMesh()
	std.Services = append(std.Services, extAuthzService)
	std.Configs = append(std.Configs, loadSecurity(t, mysqlPolicy+"---\n"+customPolicy("db", "mysql", "sample-ext-authz-grpc"))...)
	mysql := build(t, std, nt.Proxy("10.2.0.1", "mysql-0", "db", map[string]string{"app": "mysql"}))[listener.VirtualInbound]
	chains := chainsFor(mysql, 3306)
	if len(chains) == 0 {
		t.Fatal("no chain for mysql 3306")
	}
	checked := 0
	for name, fc := range chains {
		var got []string
		for _, f := range nt.WithoutTelemetryNet(fc.GetFilters()) {
			got = append(got, f.GetName())
		}
		if got[len(got)-1] == wellknown.TCPProxy && nt.MainFilter(fc).GetName() == wellknown.TCPProxy {
			continue // a rejecting chain (BlackHole)
		}
		wantTCP := []string{"envoy.filters.network.rbac.custom", wellknown.ExternalAuthorization, "envoy.filters.network.rbac.audit", wellknown.RoleBasedAccessControl, wellknown.TCPProxy}
		if !slices.Equal(got, wantTCP) {
			t.Errorf("mysql chain %s filters %q, want %q", name, got, wantTCP)
		}
		checked++
	}
	if checked == 0 {
		t.Error("mysql has no accepting chain on 3306")
	}

	// An HTTP provider cannot check TCP: the TCP chain has no CUSTOM filters.
	std.Mesh = extAuthzMesh()
	std.Configs = append(nt.Standard().Configs, loadSecurity(t, mysqlPolicy+"---\n"+customPolicy("db", "mysql", "sample-ext-authz-http"))...)
	mysql = build(t, std, nt.Proxy("10.2.0.1", "mysql-0", "db", map[string]string{"app": "mysql"}))[listener.VirtualInbound]
	for name, fc := range chainsFor(mysql, 3306) {
		for _, f := range fc.GetFilters() {
			if f.GetName() == wellknown.ExternalAuthorization || f.GetName() == "envoy.filters.network.rbac.custom" {
				t.Errorf("mysql chain %s has %s with an HTTP provider", name, f.GetName())
			}
		}
	}
}

// TestInboundExtAuthzUnknownProvider: a CUSTOM policy naming no provider
// puts a deny-all RBAC filter first on the workload's chains.
func TestInboundExtAuthzUnknownProvider(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Mesh = extAuthzMesh()
	in.Services = append(in.Services, extAuthzService)
	in.Configs = append(in.Configs, loadSecurity(t, customPolicy("default", "productpage", "no-such-provider"))...)
	for name, fc := range chainsFor(build(t, in, nt.BookinfoProxy("productpage-v1"))[listener.VirtualInbound], 9080) {
		if nt.MainFilter(fc).GetName() != wellknown.HTTPConnectionManager {
			continue
		}
		first := nt.WithoutTelemetry(hcm(t, nt.MainFilter(fc)).GetHttpFilters())[0]
		var r rbachttpv3.RBAC
		if first.GetName() != "envoy.filters.http.rbac.custom" || first.GetTypedConfig().UnmarshalTo(&r) != nil {
			t.Fatalf("chain %s first filter %s, want the CUSTOM deny-all", name, first.GetName())
		}
		p := r.GetRules().GetPolicies()["default-deny-all-due-to-bad-CUSTOM-action"]
		if r.GetRules().GetAction().String() != "DENY" || !p.GetPermissions()[0].GetAny() || !p.GetPrincipals()[0].GetAny() {
			t.Errorf("chain %s CUSTOM fallback %v, want DENY any", name, r.GetRules())
		}
	}
}
