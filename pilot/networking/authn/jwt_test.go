package authn_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// jwtConfig builds the filter of a workload and decodes it; it fails the
// test unless the filter passes ValidateAll.
func jwtConfig(t *testing.T, push *model.PushContext, ns string, labels map[string]string) (*jwtv3.JwtAuthentication, []string) {
	t.Helper()
	f, warnings, err := authn.JWTFilterFor(push.SecurityPolicies(), ns, labels)
	if err != nil {
		t.Fatal(err)
	}
	if f == nil {
		return nil, warnings
	}
	return decodeJWT(t, f), warnings
}

func decodeJWT(t *testing.T, f *hcmv3.HttpFilter) *jwtv3.JwtAuthentication {
	t.Helper()
	nt.ValidateRecursively(t, f)
	if f.GetName() != authn.JWTFilterName {
		t.Errorf("filter name %q, want %s", f.GetName(), authn.JWTFilterName)
	}
	var cfg jwtv3.JwtAuthentication
	if err := f.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// issuers returns the issuers of the providers, in provider name order.
func issuers(cfg *jwtv3.JwtAuthentication) []string {
	names := make([]string, 0, len(cfg.GetProviders()))
	for n := range cfg.GetProviders() {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, n+"="+cfg.GetProviders()[n].GetIssuer())
	}
	return out
}

// TestJWTSelection: the root namespace's policy applies mesh-wide, the
// namespace's without a selector to all its workloads, one with a selector
// only to matching workloads; all that apply are merged, sorted by issuer.
func TestJWTSelection(t *testing.T) {
	push := nt.Input{Configs: loadConfigs(t, "request-authentication.yaml")}.PushContext()
	cases := []struct {
		name   string
		ns     string
		labels map[string]string
		want   []string
	}{
		{"httpbin gets mesh, namespace and workload policies", "foo", map[string]string{"app": "httpbin", "version": "v1"},
			[]string{"origins-0=https://accounts.example.com", "origins-1=inline@meshpilot.example", "origins-2=testing@secure.istio.io"}},
		{"selector mismatch", "foo", map[string]string{"app": "sleep"},
			[]string{"origins-0=https://accounts.example.com", "origins-1=inline@meshpilot.example"}},
		{"other namespace", "baz", map[string]string{"app": "httpbin"}, []string{"origins-0=inline@meshpilot.example"}},
		{"root namespace workload", "istio-system", nil, []string{"origins-0=inline@meshpilot.example"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, warnings := jwtConfig(t, push, tc.ns, tc.labels)
			if len(warnings) != 0 {
				t.Errorf("warnings %q", warnings)
			}
			if got := issuers(cfg); !slices.Equal(got, tc.want) {
				t.Errorf("providers %q, want %q", got, tc.want)
			}
			if !cfg.GetBypassCorsPreflight() || len(cfg.GetRules()) != 1 || cfg.GetRules()[0].GetMatch().GetPrefix() != "/" {
				t.Errorf("rules %v bypass_cors_preflight %v, want one rule on prefix / and CORS bypass", cfg.GetRules(), cfg.GetBypassCorsPreflight())
			}
		})
	}
	if sp := push.SecurityPolicies(); len(sp.RequestAuthenticationsFor("bar", nil)) != 2 {
		t.Errorf("bar gets %d policies, want mesh-inline and bar-wide", len(sp.RequestAuthenticationsFor("bar", nil)))
	}
}

// TestJWTProviderFields checks the Envoy fields that carry each
// RequestAuthentication field.
func TestJWTProviderFields(t *testing.T) {
	push := nt.Input{Configs: loadConfigs(t, "request-authentication.yaml")}.PushContext()
	cfg, _ := jwtConfig(t, push, "foo", map[string]string{"app": "httpbin"})
	full, inline, remote := cfg.GetProviders()["origins-0"], cfg.GetProviders()["origins-1"], cfg.GetProviders()["origins-2"]

	if got := inline.GetLocalJwks().GetInlineString(); !strings.HasPrefix(got, `{"keys":[{"kty":"RSA"`) || inline.GetRemoteJwks() != nil {
		t.Errorf("inline jwks: local_jwks %q remote %v", got, inline.GetRemoteJwks())
	}
	ru := remote.GetRemoteJwks().GetHttpUri()
	if ru.GetUri() != "https://raw.githubusercontent.com/istio/istio/release-1.24/security/tools/jwt/samples/jwks.json" ||
		ru.GetCluster() != "outbound|443||raw.githubusercontent.com" || ru.GetTimeout().AsDuration() != 5*time.Second ||
		remote.GetRemoteJwks().GetCacheDuration().AsDuration() != 5*time.Minute {
		t.Errorf("jwksUri: remote_jwks %v", remote.GetRemoteJwks())
	}
	if c := full.GetRemoteJwks().GetHttpUri(); c.GetCluster() != "outbound|8080||jwks.foo.svc.cluster.local" || c.GetTimeout().AsDuration() != 2*time.Second {
		t.Errorf("http jwksUri with port and timeout: %v", c)
	}
	for name, p := range cfg.GetProviders() {
		if p.GetPayloadInMetadata() != authn.JWTPayloadKey {
			t.Errorf("%s payload_in_metadata %q, want %q", name, p.GetPayloadInMetadata(), authn.JWTPayloadKey)
		}
		if got := p.GetNormalizePayloadInMetadata().GetSpaceDelimitedClaims(); !slices.Contains(got, "scope") || !slices.Contains(got, "permission") {
			t.Errorf("%s space_delimited_claims %q, want scope and permission", name, got)
		}
	}
	if !slices.Equal(full.GetAudiences(), []string{"bookstore_android.apps.example.com", "bookstore_web.apps.example.com"}) ||
		!full.GetForward() || full.GetForwardPayloadHeader() != "x-jwt-payload" ||
		!slices.Equal(full.GetFromParams(), []string{"my_token"}) || !slices.Equal(full.GetFromCookies(), []string{"session"}) {
		t.Errorf("provider fields %v", full)
	}
	if h := full.GetFromHeaders(); len(h) != 2 || h[0].GetName() != "x-goog-iap-jwt-assertion" || h[0].GetValuePrefix() != "" ||
		h[1].GetName() != "Authorization" || h[1].GetValuePrefix() != "Bearer " {
		t.Errorf("from_headers %v", h)
	}
	if c := full.GetClaimToHeaders(); len(c) != 1 || c[0].GetHeaderName() != "x-jwt-claim-group" || c[0].GetClaimName() != "group" {
		t.Errorf("claim_to_headers %v", c)
	}
	if got := full.GetNormalizePayloadInMetadata().GetSpaceDelimitedClaims(); !slices.Equal(got, []string{"permission", "roles", "scope"}) {
		t.Errorf("space_delimited_claims %q", got)
	}
	if remote.GetAudiences() != nil || remote.GetForward() || remote.GetFromHeaders() != nil {
		t.Errorf("defaults: %v", remote)
	}
}

// TestJWTRequirement: with one provider a request passes with a valid
// token or none ({provider OR allow_missing}); with several, Istio's
// {P0 OR P1 ... OR AND{P0 OR allow_missing, ...}}.
func TestJWTRequirement(t *testing.T) {
	push := nt.Input{Configs: loadConfigs(t, "request-authentication.yaml")}.PushContext()
	one, _ := jwtConfig(t, push, "baz", nil)
	req := one.GetRules()[0].GetRequires().GetRequiresAny().GetRequirements()
	if len(req) != 2 || req[0].GetProviderName() != "origins-0" || req[1].GetAllowMissing() == nil {
		t.Errorf("one provider: requires %v, want any of origins-0, allow_missing", one.GetRules()[0].GetRequires())
	}

	three, _ := jwtConfig(t, push, "foo", map[string]string{"app": "httpbin"})
	req = three.GetRules()[0].GetRequires().GetRequiresAny().GetRequirements()
	if len(req) != 4 {
		t.Fatalf("three providers: requires %v, want any of 3 providers and an AND", three.GetRules()[0].GetRequires())
	}
	for i := range 3 {
		if want := "origins-" + string(rune('0'+i)); req[i].GetProviderName() != want {
			t.Errorf("requirement %d: %v, want provider %s", i, req[i], want)
		}
		inner := req[3].GetRequiresAll().GetRequirements()[i].GetRequiresAny().GetRequirements()
		if len(inner) != 2 || inner[0].GetProviderName() != "origins-"+string(rune('0'+i)) || inner[1].GetAllowMissing() == nil {
			t.Errorf("AND element %d: %v, want provider or allow_missing", i, inner)
		}
	}
	if none, w := jwtConfig(t, nt.Input{}.PushContext(), "foo", nil); none != nil || w != nil {
		t.Errorf("no policy: %v %q, want no filter", none, w)
	}
}

// TestJWTBrokenPolicy: a policy with an invalid field is ignored with a
// warning naming it; the others still apply.
func TestJWTBrokenPolicy(t *testing.T) {
	// A rule without issuer: a cluster, and so the file source, refuses it;
	// given anyway, the generator ignores the policy with a warning.
	noIssuer := model.Config{Meta: model.Meta{Kind: model.KindRequestAuthentication, Name: "no-issuer", Namespace: "foo"},
		Spec: &security.RequestAuthentication{JwtRules: []*security.JWTRule{
			{Issuer: "ok@example.com", JwksUri: "https://ok.example.com/jwks.json"},
			{JwksUri: "https://ok.example.com/jwks.json"},
		}}}
	push := nt.Input{Configs: append(loadConfigs(t, "request-authentication-broken.yaml"), noIssuer)}.PushContext()
	cfg, warnings := jwtConfig(t, push, "foo", nil)
	if got := issuers(cfg); !slices.Equal(got, []string{"origins-0=testing@secure.istio.io"}) {
		t.Errorf("providers %q, want the valid policy's only", got)
	}
	want := []string{
		`RequestAuthentication foo/broken: spec.jwtRules[0].jwks: not a JSON Web Key Set: invalid character 'o' in literal null (expecting 'u'); policy ignored`,
		`RequestAuthentication foo/no-issuer: spec.jwtRules[1].issuer: must not be empty; policy ignored`,
	}
	if !slices.Equal(warnings, want) {
		t.Errorf("warnings\n%q\nwant\n%q", warnings, want)
	}
}

// TestJWTValidation covers the other checks, one field each.
func TestJWTValidation(t *testing.T) {
	cases := map[string]struct {
		rule *security.JWTRule
		want string
	}{
		"no keys":           {&security.JWTRule{Issuer: "i", Jwks: `{"kty":"RSA"}`}, `spec.jwtRules[0].jwks: not a JSON Web Key Set: no "keys"`},
		"empty key set":     {&security.JWTRule{Issuer: "i", Jwks: `{"keys":[]}`}, "spec.jwtRules[0].jwks: the key set has no keys"},
		"no key source":     {&security.JWTRule{Issuer: "i"}, "spec.jwtRules[0]: needs jwks or jwksUri"},
		"bad scheme":        {&security.JWTRule{Issuer: "i", JwksUri: "ftp://x/keys"}, `spec.jwtRules[0].jwksUri: scheme "ftp"`},
		"bad port":          {&security.JWTRule{Issuer: "i", JwksUri: "https://x:0/keys"}, `spec.jwtRules[0].jwksUri: "https://x:0/keys": bad port "0"`},
		"header name":       {&security.JWTRule{Issuer: "i", JwksUri: "https://x/k", FromHeaders: []*security.JWTHeader{{Name: "bad header"}}}, "spec.jwtRules[0].fromHeaders[0].name"},
		"claim header":      {&security.JWTRule{Issuer: "i", JwksUri: "https://x/k", OutputClaimToHeaders: []*security.ClaimToHeader{{Header: "x-a", Claim: ""}}}, "spec.jwtRules[0].outputClaimToHeaders[0].claim"},
		"payload header":    {&security.JWTRule{Issuer: "i", JwksUri: "https://x/k", OutputPayloadToHeader: "a:b"}, "spec.jwtRules[0].outputPayloadToHeader"},
		"empty param":       {&security.JWTRule{Issuer: "i", JwksUri: "https://x/k", FromParams: []string{""}}, "spec.jwtRules[0].fromParams[0]"},
		"empty cookie name": {&security.JWTRule{Issuer: "i", JwksUri: "https://x/k", FromCookies: []string{""}}, "spec.jwtRules[0].fromCookies[0]"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &model.Config{Meta: model.Meta{Kind: model.KindRequestAuthentication, Name: "p", Namespace: "ns"},
				Spec: &security.RequestAuthentication{JwtRules: []*security.JWTRule{tc.rule}}}
			f, warnings, err := authn.JWTFilter([]*model.Config{c})
			if err != nil || f != nil {
				t.Fatalf("filter %v err %v, want none", f, err)
			}
			if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "RequestAuthentication ns/p: "+tc.want) {
				t.Errorf("warnings %q, want one starting %q", warnings, tc.want)
			}
		})
	}
}

// TestJWTBothKeySources: an inline jwks wins over jwksUri, with a warning.
func TestJWTBothKeySources(t *testing.T) {
	c := &model.Config{Meta: model.Meta{Kind: model.KindRequestAuthentication, Name: "p", Namespace: "ns"},
		Spec: &security.RequestAuthentication{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "a"}},
			JwtRules: []*security.JWTRule{{Issuer: "i", Jwks: `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`, JwksUri: "https://x/k"}},
		}}
	f, warnings, err := authn.JWTFilter([]*model.Config{c})
	if err != nil {
		t.Fatal(err)
	}
	p := decodeJWT(t, f).GetProviders()["origins-0"]
	if p.GetLocalJwks() == nil || p.GetRemoteJwks() != nil {
		t.Errorf("provider %v, want local_jwks only", p)
	}
	if len(warnings) != 1 || warnings[0] != "RequestAuthentication ns/p: spec.jwtRules[0].jwksUri: ignored, the inline jwks is used" {
		t.Errorf("warnings %q", warnings)
	}
}
