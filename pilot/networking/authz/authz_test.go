package authz_test

import (
	"regexp"
	"strings"
	"testing"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	security "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authz"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

func httpRules(t *testing.T, f authz.Filters) []*rbacv3.RBAC {
	t.Helper()
	var out []*rbacv3.RBAC
	for _, h := range f.HTTP {
		if !authz.IsRBACFilter(h.GetName()) {
			t.Errorf("filter name %q", h.GetName())
		}
		var r rbachttpv3.RBAC
		if err := h.GetTypedConfig().UnmarshalTo(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r.GetRules())
	}
	return out
}

// TestSelection: root-namespace policies apply mesh-wide, others only in
// their namespace, a selector narrows to matching workloads.
func TestSelection(t *testing.T) {
	push := loadPush(t, "testdata/in/bookinfo.yaml")
	names := func(ns string, labels map[string]string) string {
		var out []string
		for _, c := range push.SecurityPolicies().AuthorizationPoliciesFor(ns, labels) {
			out = append(out, c.Namespace+"/"+c.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names("default", map[string]string{"app": "productpage"}); got != "istio-system/audit-admin,default/deny-foo,default/productpage-viewer" {
		t.Errorf("productpage policies %s", got)
	}
	if got := names("default", map[string]string{"app": "ratings"}); got != "istio-system/audit-admin,default/deny-foo,default/ratings-only" {
		t.Errorf("ratings policies %s", got)
	}
	if got := names("foo", map[string]string{"app": "productpage"}); got != "istio-system/audit-admin" {
		t.Errorf("foo policies %s", got)
	}
}

// TestNamespaceRegex: namespaces: ["foo"] matches SPIFFE IDs of namespace
// foo only (the regex Envoy and grpc-go evaluate is RE2, as Go's).
func TestNamespaceRegex(t *testing.T) {
	f, err := authz.ForWorkload(loadPush(t, "testdata/in/bookinfo.yaml"), "default", map[string]string{"app": "productpage"})
	if err != nil {
		t.Fatal(err)
	}
	deny := httpRules(t, f)[1]
	if deny.GetAction() != rbacv3.RBAC_DENY {
		t.Fatalf("second filter %s, want DENY", deny.GetAction())
	}
	re := regexp.MustCompile(deny.GetPolicies()["ns[default]-policy[deny-foo]-rule[0]"].GetPrincipals()[0].GetAuthenticated().GetPrincipalName().GetSafeRegex().GetRegex())
	for id, want := range map[string]bool{
		"spiffe://cluster.local/ns/foo/sa/default":    true,
		"spiffe://td.example/ns/foo/sa/x":             true,
		"spiffe://cluster.local/ns/foobar/sa/default": false,
		"spiffe://cluster.local/ns/bar/sa/foo":        false,
	} {
		if m := re.FindString(id) == id; m != want {
			t.Errorf("%s matches %v, want %v", id, m, want)
		}
	}
}

// TestEmptyPolicies: an ALLOW policy without rules allows nothing; a rule
// with nothing in it matches everything.
func TestEmptyPolicies(t *testing.T) {
	ap := func(name string, action security.AuthorizationPolicy_Action, rules ...*security.Rule) model.Config {
		return model.Config{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: name, Namespace: "default"},
			Spec: &security.AuthorizationPolicy{Action: action, Rules: rules}}
	}
	push := nt.Input{Configs: []model.Config{ap("allow-nothing", security.AuthorizationPolicy_ALLOW)}}.PushContext()
	f, err := authz.ForWorkload(push, "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := httpRules(t, f); len(r) != 1 || r[0].GetAction() != rbacv3.RBAC_ALLOW || len(r[0].GetPolicies()) != 0 {
		t.Errorf("allow-nothing: %v, want one ALLOW filter with no policies (denies all)", r)
	}
	push = nt.Input{Configs: []model.Config{ap("allow-all", security.AuthorizationPolicy_ALLOW, &security.Rule{})}}.PushContext()
	if f, err = authz.ForWorkload(push, "default", nil); err != nil {
		t.Fatal(err)
	}
	p := httpRules(t, f)[0].GetPolicies()["ns[default]-policy[allow-all]-rule[0]"]
	if !p.GetPermissions()[0].GetAny() || !p.GetPrincipals()[0].GetAny() {
		t.Errorf("allow-all rule %v, want any/any", p)
	}
	if f, err = authz.ForWorkload(nt.Input{}.PushContext(), "default", nil); err != nil || !f.Empty() {
		t.Errorf("no policy: %v %v, want no filters", f, err)
	}
}

// TestInvalidValues: a value that is not an IP or port is a warning naming
// the field; an ALLOW rule with one is dropped, a DENY rule denies all.
func TestInvalidValues(t *testing.T) {
	bad := &security.Rule{From: []*security.Rule_From{{Source: &security.Source{IpBlocks: []string{"not-an-ip"}}}}}
	push := nt.Input{Configs: []model.Config{
		{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "a", Namespace: "default"}, Spec: &security.AuthorizationPolicy{Rules: []*security.Rule{bad}}},
		{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "d", Namespace: "default"}, Spec: &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_DENY, Rules: []*security.Rule{bad}}},
	}}.PushContext()
	f, err := authz.ForWorkload(push, "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := httpRules(t, f)
	if len(r) != 2 || len(r[1].GetPolicies()) != 0 || !r[0].GetPolicies()["ns[default]-policy[d]-rule[0]"].GetPrincipals()[0].GetAny() {
		t.Errorf("rules %v: want DENY any, ALLOW none", r)
	}
	joined := strings.Join(f.Warnings, "\n")
	for _, want := range []string{"AuthorizationPolicy default/a: spec.rules[0].from[0].source.ipBlocks", "AuthorizationPolicy default/d: spec.rules[0].from[0].source.ipBlocks"} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings %q lack %q", f.Warnings, want)
		}
	}
}
