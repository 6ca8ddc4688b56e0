package authz

import (
	"strings"
	"testing"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	security "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// describe renders a string matcher as "exact:x", "prefix:x", "suffix:x", "regex:x".
func describe(m *matcherv3.StringMatcher) string {
	switch {
	case m.GetSafeRegex() != nil:
		return "regex:" + m.GetSafeRegex().GetRegex()
	case m.GetPrefix() != "":
		return "prefix:" + m.GetPrefix()
	case m.GetSuffix() != "":
		return "suffix:" + m.GetSuffix()
	}
	return "exact:" + m.GetExact()
}

// claimOf returns the claim path and string matcher of a payload metadata principal.
func claimOf(t *testing.T, p *rbacv3.Principal) (string, *matcherv3.StringMatcher) {
	t.Helper()
	m := p.GetMetadata()
	if m.GetFilter() != authn.JWTFilterName || len(m.GetPath()) < 2 || m.GetPath()[0].GetKey() != authn.JWTPayloadKey {
		t.Fatalf("principal %v is not a jwt_authn payload matcher", p)
	}
	var keys []string
	for _, s := range m.GetPath()[1:] {
		keys = append(keys, s.GetKey())
	}
	return strings.Join(keys, "."), m.GetValue().GetStringMatch()
}

// TestRequestPrincipal: Istio splits "ISS/SUB" at the last "/" and reads
// the wildcards per side.
func TestRequestPrincipal(t *testing.T) {
	cases := map[string]string{
		"testing@secure.istio.io/testing@secure.istio.io": "exact:testing@secure.istio.io exact:testing@secure.istio.io",
		"https://accounts.example.com/u1":                 "exact:https://accounts.example.com exact:u1",
		"*":                                               "regex:.+ regex:.+",
		"*/u1":                                            "regex:.+ exact:u1",
		"*example.com/u1":                                 "suffix:example.com exact:u1",
		"https://x.example/*":                             "exact:https://x.example regex:.+",
		"https://x.example/team-*":                        "exact:https://x.example prefix:team-",
		"*blocked":                                        "regex:.+ suffix:blocked",
		"issuer*":                                         "prefix:issuer regex:.+",
		"issuer-only":                                     "exact:issuer-only exact:",
	}
	for v, want := range cases {
		p := requestPrincipalID(v)
		if err := nt.Validate(p); err != nil {
			t.Errorf("%q: %v", v, err)
		}
		ids := p.GetAndIds().GetIds()
		if len(ids) != 2 {
			t.Fatalf("%q: %v, want AND of iss and sub", v, p)
		}
		issKey, iss := claimOf(t, ids[0])
		subKey, sub := claimOf(t, ids[1])
		if issKey != "iss" || subKey != "sub" {
			t.Errorf("%q: claims %s, %s", v, issKey, subKey)
		}
		if got := describe(iss) + " " + describe(sub); got != want {
			t.Errorf("%q: %s, want %s", v, got, want)
		}
	}
}

// TestClaimKeys: request.auth.claims[a][b] is the nested claim a.b, and
// matches a string or any element of a list; a malformed key is an error
// naming the condition.
func TestClaimKeys(t *testing.T) {
	for key, want := range map[string]string{
		"request.auth.claims[groups]":          "groups",
		"request.auth.claims[nested][key][k2]": "nested.key.k2",
		"request.auth.claims[a.b]":             "a.b",
		"request.auth.audiences":               "aud",
		"request.auth.presenter":               "azp",
	} {
		conv, handled, err := jwtKey(key)
		if !handled || err != nil {
			t.Fatalf("%s: handled %v err %v", key, handled, err)
		}
		p := conv("admin")
		m := p.GetMetadata()
		var keys []string
		for _, s := range m.GetPath()[1:] {
			keys = append(keys, s.GetKey())
		}
		or := m.GetValue().GetOrMatch().GetValueMatchers()
		if strings.Join(keys, ".") != want || len(or) != 2 ||
			or[0].GetListMatch().GetOneOf().GetStringMatch().GetExact() != "admin" || or[1].GetStringMatch().GetExact() != "admin" {
			t.Errorf("%s: %v, want path %s matching a string or list element", key, p, want)
		}
		if err := nt.Validate(p); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
	for _, bad := range []string{"request.auth.claims", "request.auth.claims[]", "request.auth.claims[a]b]", "request.auth.claimsx"} {
		if _, handled, err := jwtKey(bad); !handled || err == nil {
			t.Errorf("%s: handled %v err %v, want an error", bad, handled, err)
		}
	}
	if _, handled, _ := jwtKey("request.auth.other"); handled {
		t.Errorf("request.auth.other handled")
	}

	ap := &model.Config{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "p", Namespace: "ns"}, Spec: &security.AuthorizationPolicy{
		Rules: []*security.Rule{{When: []*security.Condition{{Key: "request.auth.claims[]", Values: []string{"x"}}}}}}}
	f, err := Build([]*model.Config{ap}, Providers{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Warnings) != 1 || !strings.HasPrefix(f.Warnings[0], `AuthorizationPolicy ns/p: spec.rules[0].when[0] (key "request.auth.claims[]"): bad claim name`) {
		t.Errorf("warnings %q", f.Warnings)
	}
}

// TestJWTOnTCP: on a TCP port an ALLOW rule with a JWT field matches
// nothing, a DENY rule is kept without it (it denies more), as in Istio.
func TestJWTOnTCP(t *testing.T) {
	rule := &security.Rule{
		From: []*security.Rule_From{{Source: &security.Source{RequestPrincipals: []string{"*"}}}},
		To:   []*security.Rule_To{{Operation: &security.Operation{Ports: []string{"3306"}}}},
	}
	policies := []*model.Config{
		{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "allow", Namespace: "ns"}, Spec: &security.AuthorizationPolicy{Rules: []*security.Rule{rule}}},
		{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "deny", Namespace: "ns"}, Spec: &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_DENY, Rules: []*security.Rule{rule}}},
	}
	f, err := Build(policies, Providers{})
	if err != nil {
		t.Fatal(err)
	}
	var deny, allow rbacnetv3.RBAC
	if err := f.Network[0].GetTypedConfig().UnmarshalTo(&deny); err != nil {
		t.Fatal(err)
	}
	if err := f.Network[1].GetTypedConfig().UnmarshalTo(&allow); err != nil {
		t.Fatal(err)
	}
	if len(allow.GetRules().GetPolicies()) != 0 {
		t.Errorf("TCP ALLOW policies %v, want none", allow.GetRules().GetPolicies())
	}
	dp := deny.GetRules().GetPolicies()["ns[ns]-policy[deny]-rule[0]"]
	if !dp.GetPrincipals()[0].GetAny() || dp.GetPermissions()[0].GetDestinationPort() != 3306 {
		t.Errorf("TCP DENY rule %v, want any principal on port 3306", dp)
	}
	if len(f.NetworkWarnings) != 2 || len(f.Warnings) != 0 {
		t.Errorf("warnings %q network %q", f.Warnings, f.NetworkWarnings)
	}
}
