package model

import (
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// Kinds of security.istio.io configuration. Their values are the ones
// pilot/config/file and pilot/config/kube use.
const (
	KindPeerAuthentication    Kind = "PeerAuthentication"
	KindAuthorizationPolicy   Kind = "AuthorizationPolicy"
	KindRequestAuthentication Kind = "RequestAuthentication"
)

// SecurityPolicies indexes the PeerAuthentication and AuthorizationPolicy
// objects of a snapshot by namespace. It is immutable once built.
type SecurityPolicies struct {
	// RootNamespace holds the mesh-wide policies.
	RootNamespace string
	peer          map[string][]*Config
	authz         map[string][]*Config
}

// NewSecurityPolicies indexes the security policies of store.
func NewSecurityPolicies(store ConfigStore, rootNamespace string) *SecurityPolicies {
	s := &SecurityPolicies{RootNamespace: rootNamespace, peer: map[string][]*Config{}, authz: map[string][]*Config{}}
	if store == nil {
		return s
	}
	peers := store.List(KindPeerAuthentication)
	for i := range peers {
		if _, ok := peers[i].Spec.(*security.PeerAuthentication); ok {
			s.peer[peers[i].Namespace] = append(s.peer[peers[i].Namespace], &peers[i])
		}
	}
	authzs := store.List(KindAuthorizationPolicy)
	for i := range authzs {
		if _, ok := authzs[i].Spec.(*security.AuthorizationPolicy); ok {
			s.authz[authzs[i].Namespace] = append(s.authz[authzs[i].Namespace], &authzs[i])
		}
	}
	return s
}

// securityPoliciesFor returns prev's index when req touches no security
// kind, else a fresh one from env.
func securityPoliciesFor(env *Environment, prev *PushContext, req *PushRequest, reuse bool) *SecurityPolicies {
	if reuse && prev != nil && prev.security != nil && !req.Updated(KindPeerAuthentication) && !req.Updated(KindAuthorizationPolicy) {
		return prev.security
	}
	return NewSecurityPolicies(env.ConfigStore, env.RootNamespace())
}

// SecurityPolicies returns the snapshot's security policy index (never nil).
func (pc *PushContext) SecurityPolicies() *SecurityPolicies {
	if pc.security == nil {
		return &SecurityPolicies{RootNamespace: pc.RootNamespace}
	}
	return pc.security
}

// PeerAuthentications returns the PeerAuthentications of namespace ns, in
// store order (name order).
func (s *SecurityPolicies) PeerAuthentications(ns string) []*Config { return s.peer[ns] }

// AuthorizationPolicies returns the AuthorizationPolicies of namespace ns.
func (s *SecurityPolicies) AuthorizationPolicies(ns string) []*Config { return s.authz[ns] }

// AuthorizationPoliciesFor returns the AuthorizationPolicies that apply to a
// workload in namespace ns with workloadLabels: those of the root namespace
// and of ns without a selector or whose selector matches, root first.
func (s *SecurityPolicies) AuthorizationPoliciesFor(ns string, workloadLabels map[string]string) []*Config {
	var out []*Config
	namespaces := []string{s.RootNamespace}
	if ns != s.RootNamespace {
		namespaces = append(namespaces, ns)
	}
	for _, n := range namespaces {
		for _, c := range s.authz[n] {
			if SelectorMatches(c.Spec.(*security.AuthorizationPolicy).GetSelector(), workloadLabels) {
				out = append(out, c)
			}
		}
	}
	return out
}

// SelectorMatches reports whether a workload selector selects labels; a nil
// or empty selector selects every workload.
func SelectorMatches(sel *typev1beta1.WorkloadSelector, workloadLabels map[string]string) bool {
	if len(sel.GetMatchLabels()) == 0 {
		return true
	}
	for k, v := range sel.GetMatchLabels() {
		if got, ok := workloadLabels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
