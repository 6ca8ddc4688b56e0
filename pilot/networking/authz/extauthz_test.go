package authz_test

import (
	"regexp"
	"strings"
	"testing"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	meshconfig "istio.io/api/mesh/v1alpha1"
	security "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authz"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

func customAP(name, provider string) *model.Config {
	return &model.Config{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: name, Namespace: "default"},
		Spec: &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_CUSTOM, ActionDetail: &security.AuthorizationPolicy_Provider{Provider: &security.AuthorizationPolicy_ExtensionProvider{Name: provider}},
			Rules: []*security.Rule{{}}}}
}

func providers(ps ...*meshconfig.MeshConfig_ExtensionProvider) authz.Providers {
	svc := extAuthzService()
	return authz.Providers{Mesh: &meshconfig.MeshConfig{ExtensionProviders: ps}, Service: func(h string) *model.Service {
		if h == svc.Hostname {
			return svc
		}
		return nil
	}}
}

func httpProvider(name string, p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) *meshconfig.MeshConfig_ExtensionProvider {
	return &meshconfig.MeshConfig_ExtensionProvider{Name: name, Provider: &meshconfig.MeshConfig_ExtensionProvider_EnvoyExtAuthzHttp{EnvoyExtAuthzHttp: p}}
}

// isDenyAll reports whether f holds only the CUSTOM deny-all fallback.
func isDenyAll(t *testing.T, f authz.Filters) bool {
	t.Helper()
	if len(f.CustomHTTP) != 1 || len(f.CustomNetwork) != 1 {
		return false
	}
	var r rbachttpv3.RBAC
	if err := f.CustomHTTP[0].GetTypedConfig().UnmarshalTo(&r); err != nil {
		t.Fatal(err)
	}
	p := r.GetRules().GetPolicies()["default-deny-all-due-to-bad-CUSTOM-action"]
	return r.GetRules().GetAction() == rbacv3.RBAC_DENY && p.GetPermissions()[0].GetAny() && p.GetPrincipals()[0].GetAny()
}

// TestCustomInvalidProviders: every way a CUSTOM policy's provider can be
// unusable yields Istio's deny-all and a warning naming the policy and the
// field at fault.
func TestCustomInvalidProviders(t *testing.T) {
	host := "ext-authz.foo.svc.cluster.local"
	ok := func() *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider {
		return &meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{Service: host, Port: 8000}
	}
	with := func(f func(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider)) authz.Providers {
		p := ok()
		f(p)
		return providers(httpProvider("p", p))
	}
	cases := []struct {
		name     string
		policies []*model.Config
		ps       authz.Providers
		want     string
	}{
		{"no mesh config", []*model.Config{customAP("a", "p")}, authz.Providers{}, `spec.provider.name "p" is not a MeshConfig extensionProviders entry`},
		{"no provider name", []*model.Config{customAP("a", "")}, providers(httpProvider("p", ok())), "spec.provider.name is empty"},
		{"unknown provider", []*model.Config{customAP("a", "q")}, providers(httpProvider("p", ok())), `"q" is not a MeshConfig extensionProviders entry (have [p])`},
		{"duplicate name", []*model.Config{customAP("a", "p")}, providers(httpProvider("p", ok()), httpProvider("p", ok())), "extensionProviders[1]: the name is not unique"},
		{"not ext_authz", []*model.Config{customAP("a", "p")}, providers(&meshconfig.MeshConfig_ExtensionProvider{Name: "p",
			Provider: &meshconfig.MeshConfig_ExtensionProvider_Prometheus{Prometheus: &meshconfig.MeshConfig_ExtensionProvider_PrometheusMetricsProvider{}}}),
			"is not an envoyExtAuthzHttp or envoyExtAuthzGrpc provider"},
		{"no service", []*model.Config{customAP("a", "p")}, with(func(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) {
			p.Service = ""
		}), "envoyExtAuthzHttp: service: empty"},
		{"unknown service", []*model.Config{customAP("a", "p")}, with(func(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) {
			p.Service = "nope.foo.svc.cluster.local"
		}), `service: "nope.foo.svc.cluster.local" is not a service of the registry`},
		{"wrong namespace", []*model.Config{customAP("a", "p")}, with(func(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) {
			p.Service = "bar/" + host
		}), `service: "bar/ext-authz.foo.svc.cluster.local" is not a service`},
		{"no port", []*model.Config{customAP("a", "p")}, with(func(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) { p.Port = 0 }), "port: 0 is not in [1, 65535]"},
		{"bad status", []*model.Config{customAP("a", "p")}, with(func(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) {
			p.StatusOnError = "299"
		}), `statusOnError: "299"`},
		{"bad path prefix", []*model.Config{customAP("a", "p")}, with(func(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) {
			p.PathPrefix = "check"
		}), `pathPrefix: "check"`},
		{"wildcard header", []*model.Config{customAP("a", "p")}, with(func(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) {
			p.HeadersToUpstreamOnAllow = []string{"*"}
		}), `headersToUpstreamOnAllow: "*"`},
		{"two providers", []*model.Config{customAP("a", "p"), customAP("b", "q")}, providers(httpProvider("p", ok()), httpProvider("q", ok())),
			`must use one provider, found "p", "q"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := authz.Build(c.policies, c.ps)
			if err != nil {
				t.Fatal(err)
			}
			if !isDenyAll(t, f) {
				t.Errorf("filters %v, want the CUSTOM deny-all", f.CustomHTTP)
			}
			joined := strings.Join(f.Warnings, "\n")
			if !strings.Contains(joined, "AuthorizationPolicy default/a: ") || !strings.Contains(joined, c.want) || !strings.Contains(joined, "denies every request") {
				t.Errorf("warnings %q, want one for default/a containing %q", f.Warnings, c.want)
			}
			for _, h := range f.CustomHTTP {
				nt.ValidateRecursively(t, h)
			}
		})
	}
}

// TestCustomNamespacedService: a provider service "NAMESPACE/HOST" resolves
// to the host's outbound cluster; the deprecated includeHeadersInCheck is
// used only without includeRequestHeadersInCheck.
func TestCustomNamespacedService(t *testing.T) {
	ps := providers(httpProvider("p", &meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{
		Service: "foo/ext-authz.foo.svc.cluster.local", Port: 8000, IncludeHeadersInCheck: []string{"x-old"}}))
	f, err := authz.Build([]*model.Config{customAP("a", "p")}, ps)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.CustomHTTP) != 2 {
		t.Fatalf("custom filters %v, warnings %q", f.CustomHTTP, f.Warnings)
	}
	var ext extauthzhttpv3.ExtAuthz
	if err := f.CustomHTTP[1].GetTypedConfig().UnmarshalTo(&ext); err != nil {
		t.Fatal(err)
	}
	if got := ext.GetHttpService().GetServerUri().GetCluster(); got != "outbound|8000||ext-authz.foo.svc.cluster.local" {
		t.Errorf("cluster %q", got)
	}
	if got := ext.GetAllowedHeaders().GetPatterns(); len(got) != 1 || got[0].GetExact() != "x-old" {
		t.Errorf("allowed headers %v, want x-old", got)
	}
	if len(f.CustomNetwork) != 0 || len(f.NetworkWarnings) != 1 {
		t.Errorf("HTTP provider: network filters %v warnings %q, want none and one warning", f.CustomNetwork, f.NetworkWarnings)
	}
}

// principalRegex returns the regex of a policy's only principal matcher.
func principalRegex(t *testing.T, src *security.Source, when ...*security.Condition) *regexp.Regexp {
	t.Helper()
	rule := &security.Rule{When: when}
	if src != nil {
		rule.From = []*security.Rule_From{{Source: src}}
	}
	push := nt.Input{Configs: []model.Config{{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "p", Namespace: "default"},
		Spec: &security.AuthorizationPolicy{Rules: []*security.Rule{rule}}}}}.PushContext()
	f, err := authz.ForWorkload(push, "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Warnings) > 0 {
		t.Fatalf("warnings %q", f.Warnings)
	}
	re := httpRules(t, f)[0].GetPolicies()["ns[default]-policy[p]-rule[0]"].GetPrincipals()[0].GetAuthenticated().GetPrincipalName().GetSafeRegex().GetRegex()
	// Envoy's safe_regex matches the whole value.
	return regexp.MustCompile("^(?:" + re + ")$")
}

// TestServiceAccounts: "ns/sa" and "sa" (the policy's namespace) match
// exactly that account's SPIFFE IDs in any trust domain, as Istio.
func TestServiceAccounts(t *testing.T) {
	for _, src := range []*security.Source{{ServiceAccounts: []string{"foo/sleep"}}, nil} {
		var re *regexp.Regexp
		if src != nil {
			re = principalRegex(t, src)
		} else {
			re = principalRegex(t, nil, &security.Condition{Key: "source.serviceAccount", Values: []string{"foo/sleep"}})
		}
		for id, want := range map[string]bool{
			"spiffe://cluster.local/ns/foo/sa/sleep":        true,
			"spiffe://td.example/ns/foo/sa/sleep":           true,
			"spiffe://cluster.local/ns/foo/x/y/sa/sleep":    true,
			"spiffe://cluster.local/ns/foo/sa/sleep/extra":  true,
			"spiffe://cluster.local/ns/foo/sa/sleep2":       false,
			"spiffe://cluster.local/ns/foobar/sa/sleep":     false,
			"spiffe://cluster.local/ns/bar/sa/sleep":        false,
			"spiffe://cluster.local/ns/foo/sa/sleepy/other": false,
		} {
			if got := re.MatchString(id); got != want {
				t.Errorf("%s matches %v, want %v (%s)", id, got, want, re)
			}
		}
	}
	re := principalRegex(t, &security.Source{ServiceAccounts: []string{"productpage"}})
	if !re.MatchString("spiffe://cluster.local/ns/default/sa/productpage") || re.MatchString("spiffe://cluster.local/ns/foo/sa/productpage") {
		t.Errorf("unqualified service account regex %s, want namespace default", re)
	}
}

// TestTrustDomains: exact, prefix, suffix and presence forms.
func TestTrustDomains(t *testing.T) {
	for td, ids := range map[string]map[string]bool{
		"cluster.local": {"spiffe://cluster.local/ns/a/sa/b": true, "spiffe://clusterXlocal/ns/a/sa/b": false, "spiffe://cluster.local.evil/ns/a/sa/b": false},
		"*.example.com": {"spiffe://a.example.com/ns/a/sa/b": true, "spiffe://example.com/ns/a/sa/b": false, "spiffe://a.example.com.evil/x": false},
		"td-*":          {"spiffe://td-1/ns/a/sa/b": true, "spiffe://xtd-1/ns/a/sa/b": false},
		"*":             {"spiffe://any/ns/a/sa/b": true, "spiffe:///ns/a": false},
	} {
		re := principalRegex(t, &security.Source{TrustDomains: []string{td}})
		for id, want := range ids {
			if got := re.MatchString(id); got != want {
				t.Errorf("trust domain %q: %s matches %v, want %v (%s)", td, id, got, want, re)
			}
		}
	}
}

// BenchmarkForWorkload builds productpage's filters from the Bookinfo
// policies alone and with the CUSTOM gRPC policy of Istio's ext_authz task
// (the provider is resolved per build).
func BenchmarkForWorkload(b *testing.B) {
	for _, in := range []string{"bookinfo", "custom-grpc"} {
		b.Run(in, func(b *testing.B) {
			push := loadPush(b, "testdata/in/"+in+".yaml")
			labels := map[string]string{"app": "productpage", "version": "v1"}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := authz.ForWorkload(push, "default", labels); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
