package model_test

import (
	"strings"
	"testing"

	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/model"
)

// securityStore is a ConfigStore of security policies only.
type securityStore map[model.Kind][]model.Config

func (s securityStore) List(k model.Kind) []model.Config { return s[k] }

type noServices struct{}

func (noServices) Services() []*model.Service { return nil }

func TestSecurityPoliciesIndexAndReuse(t *testing.T) {
	store := securityStore{
		model.KindPeerAuthentication: {{Meta: model.Meta{Kind: model.KindPeerAuthentication, Name: "default", Namespace: "istio-system"},
			Spec: &security.PeerAuthentication{}}},
		model.KindAuthorizationPolicy: {
			{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "mesh", Namespace: "istio-system"}, Spec: &security.AuthorizationPolicy{}},
			{Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "web", Namespace: "app"},
				Spec: &security.AuthorizationPolicy{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "web"}}}},
		},
	}
	env := &model.Environment{ServiceDiscovery: noServices{}, ConfigStore: store, Endpoints: model.NewEndpointIndex(), DomainSuffix: "cluster.local"}
	pc := model.NewPushContext(env, nil, nil)
	sp := pc.SecurityPolicies()
	if len(sp.PeerAuthentications("istio-system")) != 1 || sp.RootNamespace != "istio-system" {
		t.Fatalf("index %+v", sp)
	}
	if got := sp.AuthorizationPoliciesFor("app", map[string]string{"app": "web"}); len(got) != 2 {
		t.Errorf("web gets %d policies, want mesh and web", len(got))
	}
	if got := sp.AuthorizationPoliciesFor("app", map[string]string{"app": "db"}); len(got) != 1 || got[0].Name != "mesh" {
		t.Errorf("db gets %v, want mesh only", got)
	}

	svcReq := &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{{Kind: model.KindVirtualService, Name: "x", Namespace: "app"}: {}}}
	if next := model.NewPushContext(env, pc, svcReq); next.SecurityPolicies() != sp {
		t.Errorf("a VirtualService change rebuilt the security index")
	}
	paReq := &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{{Kind: model.KindPeerAuthentication, Name: "default", Namespace: "istio-system"}: {}}}
	if next := model.NewPushContext(env, pc, paReq); next.SecurityPolicies() == sp {
		t.Errorf("a PeerAuthentication change reused the security index")
	}
}

// TestRequestAuthenticationsFor: every RequestAuthentication that selects a
// workload applies (root namespace, namespace-wide, selector matches);
// targetRef policies apply to none; a RequestAuthentication change rebuilds
// the index.
func TestRequestAuthenticationsFor(t *testing.T) {
	ra := func(name, ns string, sel map[string]string) model.Config {
		spec := &security.RequestAuthentication{JwtRules: []*security.JWTRule{{Issuer: name}}}
		if sel != nil {
			spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
		}
		return model.Config{Meta: model.Meta{Kind: model.KindRequestAuthentication, Name: name, Namespace: ns}, Spec: spec}
	}
	targeted := ra("gw", "app", nil)
	targeted.Spec.(*security.RequestAuthentication).TargetRef = &typev1beta1.PolicyTargetReference{Kind: "Gateway", Group: "gateway.networking.k8s.io", Name: "gw"}
	store := securityStore{model.KindRequestAuthentication: {
		ra("mesh", "istio-system", nil),
		ra("mesh-web", "istio-system", map[string]string{"app": "web"}),
		ra("ns", "app", nil),
		ra("web", "app", map[string]string{"app": "web"}),
		ra("db", "app", map[string]string{"app": "db"}),
		ra("other", "other", nil),
		targeted,
	}}
	env := &model.Environment{ServiceDiscovery: noServices{}, ConfigStore: store, Endpoints: model.NewEndpointIndex(), DomainSuffix: "cluster.local"}
	pc := model.NewPushContext(env, nil, nil)
	sp := pc.SecurityPolicies()
	names := func(ns string, labels map[string]string) string {
		var out []string
		for _, c := range sp.RequestAuthenticationsFor(ns, labels) {
			out = append(out, c.Namespace+"/"+c.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		ns     string
		labels map[string]string
		want   string
	}{
		{"app", map[string]string{"app": "web", "version": "v1"}, "istio-system/mesh,istio-system/mesh-web,app/ns,app/web"},
		{"app", map[string]string{"app": "api"}, "istio-system/mesh,app/ns"},
		{"other", map[string]string{"app": "web"}, "istio-system/mesh,istio-system/mesh-web,other/other"},
		{"istio-system", nil, "istio-system/mesh"},
	} {
		if got := names(tc.ns, tc.labels); got != tc.want {
			t.Errorf("%s %v: %s, want %s", tc.ns, tc.labels, got, tc.want)
		}
	}
	if len(sp.RequestAuthentications("app")) != 4 {
		t.Errorf("namespace app holds %d policies, want 4", len(sp.RequestAuthentications("app")))
	}
	raReq := &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{{Kind: model.KindRequestAuthentication, Name: "ns", Namespace: "app"}: {}}}
	if next := model.NewPushContext(env, pc, raReq); next.SecurityPolicies() == sp {
		t.Errorf("a RequestAuthentication change reused the security index")
	}
	svcReq := &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{{Kind: model.KindVirtualService, Name: "x", Namespace: "app"}: {}}}
	if next := model.NewPushContext(env, pc, svcReq); next.SecurityPolicies() != sp {
		t.Errorf("a VirtualService change rebuilt the security index")
	}
}
