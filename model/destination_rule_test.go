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
