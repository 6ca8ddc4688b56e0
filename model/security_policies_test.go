package model_test

import (
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
