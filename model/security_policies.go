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

// SecurityPolicies indexes the PeerAuthentication, AuthorizationPolicy and
// RequestAuthentication objects of a snapshot by namespace. It is immutable
// once built.
type SecurityPolicies struct {
	// RootNamespace holds the mesh-wide policies.
	RootNamespace string
	peer          map[string][]*Config
	authz         map[string][]*Config
	request       map[string][]*Config
}

// NewSecurityPolicies indexes the security policies of store.
func NewSecurityPolicies(store ConfigStore, rootNamespace string) *SecurityPolicies {
	s := &SecurityPolicies{RootNamespace: rootNamespace, peer: map[string][]*Config{}, authz: map[string][]*Config{}, request: map[string][]*Config{}}
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
	requests := store.List(KindRequestAuthentication)
	for i := range requests {
		if _, ok := requests[i].Spec.(*security.RequestAuthentication); ok {
			s.request[requests[i].Namespace] = append(s.request[requests[i].Namespace], &requests[i])
		}
	}
	return s
}

// securityPoliciesFor returns prev's index when req touches no security
// kind, else a fresh one from env.
func securityPoliciesFor(env *Environment, prev *PushContext, req *PushRequest, reuse bool) *SecurityPolicies {
	if reuse && prev != nil && prev.security != nil && !req.Updated(KindPeerAuthentication) && !req.Updated(KindAuthorizationPolicy) &&
		!req.Updated(KindRequestAuthentication) {
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
	return s.selecting(s.authz, ns, func(c *Config) bool {
		return SelectorMatches(c.Spec.(*security.AuthorizationPolicy).GetSelector(), workloadLabels)
	})
}

// RequestAuthentications returns the RequestAuthentications of namespace ns.
func (s *SecurityPolicies) RequestAuthentications(ns string) []*Config { return s.request[ns] }

// RequestAuthenticationsFor returns the RequestAuthentications that apply
// to a workload in namespace ns with workloadLabels, root namespace first:
// those of the root namespace and of ns without a selector or whose
// selector matches. Unlike PeerAuthentication, Istio applies all of them
// (their jwtRules are merged). Policies with targetRef or targetRefs attach
// to Gateways or Services through Gateway API policy attachment, which is
// not supported: they apply to no workload (pilot/config/support warns).
func (s *SecurityPolicies) RequestAuthenticationsFor(ns string, workloadLabels map[string]string) []*Config {
	return s.selecting(s.request, ns, func(c *Config) bool {
		ra := c.Spec.(*security.RequestAuthentication)
		if ra.GetTargetRef() != nil || len(ra.GetTargetRefs()) > 0 {
			return false
		}
		return SelectorMatches(ra.GetSelector(), workloadLabels)
	})
}

// selecting returns the policies of index in the root namespace, then in
// ns, for which match holds.
func (s *SecurityPolicies) selecting(index map[string][]*Config, ns string, match func(*Config) bool) []*Config {
	var out []*Config
	namespaces := []string{s.RootNamespace}
	if ns != s.RootNamespace {
		namespaces = append(namespaces, ns)
	}
	for _, n := range namespaces {
		for _, c := range index[n] {
			if match(c) {
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
