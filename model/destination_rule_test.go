package model

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	typev1beta1 "istio.io/api/type/v1beta1"
)

func selectingDR(ns, name, host string, sel map[string]string) Config {
	c := dr(ns, name, host)
	c.Spec.(*networking.DestinationRule).WorkloadSelector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
	return c
}

func TestDestinationRuleForWorkloadSelector(t *testing.T) {
	svc := &Service{Hostname: "reviews.bookinfo.svc.cluster.local", Namespace: "bookinfo"}
	store := fakeStore{KindDestinationRule: {
		dr("bookinfo", "a-plain", "reviews"),
		selectingDR("bookinfo", "b-canary", "reviews", map[string]string{"track": "canary"}),
		selectingDR("bookinfo", "c-canary-wild", "*.bookinfo.svc.cluster.local", map[string]string{"track": "canary"}),
		selectingDR("bookinfo", "d-wild", "*.svc.cluster.local", map[string]string{"app": "web"}),
		selectingDR("client", "e-all", "reviews.bookinfo.svc.cluster.local", nil),
		// In the root namespace a selector applies to root-namespace workloads only.
		selectingDR("istio-system", "f-root", "*.cluster.local", map[string]string{"app": "web"}),
	}}
	pc := NewPushContext(&Environment{ServiceDiscovery: fakeRegistry{svc}, ConfigStore: store, Endpoints: NewEndpointIndex(), DomainSuffix: "cluster.local"}, nil, nil)
	proxy := func(ns string, labels map[string]string) *Proxy {
		return &Proxy{Namespace: ns, Metadata: NodeMetadata{Labels: labels}}
	}
	for _, tc := range []struct {
		name  string
		proxy *Proxy
		want  string
	}{
		{"selected, exact host beats wildcard", proxy("bookinfo", map[string]string{"track": "canary", "app": "web"}), "b-canary"},
		{"selected by a wildcard rule", proxy("bookinfo", map[string]string{"app": "web"}), "d-wild"},
		{"not selected: the rule without selector", proxy("bookinfo", map[string]string{"track": "stable"}), "a-plain"},
		{"empty selector selects all of its namespace", proxy("client", nil), "e-all"},
		{"selectors of other namespaces never apply", proxy("other", map[string]string{"track": "canary", "app": "web"}), "a-plain"},
		{"root namespace selector, root proxy", proxy("istio-system", map[string]string{"app": "web"}), "f-root"},
	} {
		if got := pc.DestinationRuleFor(tc.proxy, svc); got == nil || got.Name != tc.want {
			t.Errorf("%s: got %v, want %s", tc.name, got, tc.want)
		}
	}
	// The namespace-only lookup ignores selecting rules.
	if got := pc.DestinationRule("client", svc); got == nil || got.Name != "a-plain" {
		t.Errorf("DestinationRule(client) = %v, want a-plain", got)
	}
	if s := pc.DestinationRuleScope(proxy("other", map[string]string{"track": "x"})); s != "" {
		t.Errorf("scope without selecting rules = %q, want empty", s)
	}
	a := pc.DestinationRuleScope(proxy("bookinfo", map[string]string{"track": "canary", "pod": "1"}))
	b := pc.DestinationRuleScope(proxy("bookinfo", map[string]string{"track": "canary", "pod": "2"}))
	c := pc.DestinationRuleScope(proxy("bookinfo", map[string]string{"track": "stable"}))
	if a == "" || a != b || a == c {
		t.Errorf("scopes %q %q %q: want labels the selectors name only", a, b, c)
	}
}

// TestDestinationRulesMerge: rules of one namespace for one host merge as
// in Istio — the first's exportTo, the first top-level policy set, every subset once
// (the first definition wins) — without changing the store's objects;
// rules of other namespaces do not merge.
func TestDestinationRulesMerge(t *testing.T) {
	svc := &Service{Hostname: "reviews.bookinfo.svc.cluster.local", Namespace: "bookinfo"}
	a, b, c := dr("bookinfo", "a", "reviews"), dr("bookinfo", "b", "reviews.bookinfo.svc.cluster.local"), dr("bookinfo", "c", "reviews")
	ar, br, cr := a.Spec.(*networking.DestinationRule), b.Spec.(*networking.DestinationRule), c.Spec.(*networking.DestinationRule)
	ar.Subsets = []*networking.Subset{{Name: "v1"}}
	br.Subsets = []*networking.Subset{{Name: "v1", Labels: map[string]string{"dup": "yes"}}, {Name: "v2"}}
	br.TrafficPolicy = &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{}}
	br.ExportTo = []string{"."}
	cr.TrafficPolicy = &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{}}
	cr.Subsets = []*networking.Subset{{Name: "v3"}}
	other := dr("client", "z", "reviews.bookinfo.svc.cluster.local")
	store := fakeStore{KindDestinationRule: {a, b, c, other}}
	pc := NewPushContext(&Environment{ServiceDiscovery: fakeRegistry{svc}, ConfigStore: store, Endpoints: NewEndpointIndex(), DomainSuffix: "cluster.local"}, nil, nil)

	got := pc.DestinationRule("bookinfo", svc)
	if got == nil || got.Name != "a" {
		t.Fatalf("merged rule = %v, want a's metadata", got)
	}
	rule := got.Spec.(*networking.DestinationRule)
	var names []string
	for _, s := range rule.GetSubsets() {
		names = append(names, s.GetName())
	}
	if len(names) != 3 || names[0] != "v1" || names[1] != "v2" || names[2] != "v3" || rule.GetSubsets()[0] != ar.Subsets[0] {
		t.Errorf("subsets %v: want a's v1, b's v2, c's v3", names)
	}
	if rule.GetTrafficPolicy() != br.TrafficPolicy {
		t.Errorf("top-level policy %v: want b's, the first one set", rule.GetTrafficPolicy())
	}
	if len(rule.GetExportTo()) != 0 {
		t.Errorf("exportTo %v: want a's (none: every namespace)", rule.GetExportTo())
	}
	srcs := pc.DestinationRuleSources(got)
	if len(srcs) != 3 || srcs[0].Name != "a" || srcs[1].Name != "b" || srcs[2].Name != "c" {
		t.Errorf("sources %v, want a, b, c", srcs)
	}
	if len(ar.Subsets) != 1 || ar.TrafficPolicy != nil || len(ar.ExportTo) != 0 {
		t.Errorf("store object a was changed: %v", ar)
	}
	if z := pc.DestinationRule("client", svc); z == nil || z.Name != "z" || len(pc.DestinationRuleSources(z)) != 1 {
		t.Errorf("client namespace rule = %v, want z alone", z)
	}
}
