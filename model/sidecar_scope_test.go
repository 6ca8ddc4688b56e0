package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// scopeStore is a ConfigStore over fixed configs, listed in namespace/name order.
type scopeStore map[Kind][]Config

func (s scopeStore) List(kind Kind) []Config { return s[kind] }

type scopeServices []*Service

func (l scopeServices) Services() []*Service { return l }

func scopeService(name, ns string, exportTo ...string) *Service {
	return &Service{Hostname: name + "." + ns + ".svc.cluster.local", Name: name, Namespace: ns, ExportTo: exportTo,
		Ports: []Port{{Name: "http", Port: 80, Protocol: ProtocolHTTP}}}
}

func sidecar(ns, name string, selector map[string]string, hosts ...string) Config {
	spec := &networking.Sidecar{}
	if selector != nil {
		spec.WorkloadSelector = &networking.WorkloadSelector{Labels: selector}
	}
	if hosts != nil {
		spec.Egress = []*networking.IstioEgressListener{{Hosts: hosts}}
	}
	return Config{Meta: Meta{Kind: KindSidecar, Name: name, Namespace: ns}, Spec: spec}
}

func scopePush(t testing.TB, services []*Service, configs ...Config) *PushContext {
	t.Helper()
	store := scopeStore{}
	for _, c := range configs {
		store[c.Kind] = append(store[c.Kind], c)
	}
	for _, list := range store {
		slices.SortFunc(list, func(a, b Config) int {
			if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
	}
	slices.SortFunc(services, func(a, b *Service) int { return strings.Compare(a.Hostname, b.Hostname) })
	env := &Environment{ServiceDiscovery: scopeServices(services), ConfigStore: store, Endpoints: NewEndpointIndex(), DomainSuffix: "cluster.local"}
	return NewPushContext(env, nil, nil)
}

func scopeProxy(ns string, labels map[string]string) *Proxy {
	return &Proxy{ID: "sidecar~10.0.0.1~p." + ns + "~" + ns + ".svc.cluster.local", Type: SidecarProxy, Namespace: ns,
		Metadata: NodeMetadata{Namespace: ns, Labels: labels}}
}

func hostnames(svcs []*Service) []string {
	out := []string{}
	for _, s := range svcs {
		out = append(out, s.Hostname)
	}
	return out
}

func TestSidecarPrecedence(t *testing.T) {
	app := map[string]string{"app": "reviews"}
	selected := sidecar("default", "by-selector", app, "./*")
	other := sidecar("default", "other-selector", map[string]string{"app": "ratings"}, "*/*")
	nsDefault := sidecar("default", "ns-default", nil, "./*")
	root := sidecar("istio-system", "root", nil, "./*")
	rootSelector := sidecar("istio-system", "root-selector", app, "./*")
	cases := []struct {
		name    string
		configs []Config
		proxy   *Proxy
		want    string // "ns/name", "" for none
	}{
		{"selector beats namespace default and root", []Config{selected, other, nsDefault, root}, scopeProxy("default", app), "default/by-selector"},
		{"namespace default when no selector matches", []Config{selected, other, nsDefault, root}, scopeProxy("default", map[string]string{"app": "x"}), "default/ns-default"},
		{"namespace default beats root", []Config{nsDefault, root}, scopeProxy("default", app), "default/ns-default"},
		{"root when the namespace has none", []Config{selected, nsDefault, root}, scopeProxy("other", app), "istio-system/root"},
		{"root selectors are not mesh-wide", []Config{rootSelector}, scopeProxy("other", app), ""},
		{"selector in another namespace does not apply", []Config{selected}, scopeProxy("other", app), ""},
		{"none", nil, scopeProxy("default", app), ""},
		{"gateways get none", []Config{nsDefault, root}, &Proxy{Type: Router, Namespace: "default"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pc := scopePush(t, nil, tc.configs...)
			got := ""
			if c := pc.SidecarFor(tc.proxy); c != nil {
				got = c.Namespace + "/" + c.Name
			}
			if got != tc.want {
				t.Fatalf("SidecarFor = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSidecarPrecedenceOldestSelectorWins(t *testing.T) {
	app := map[string]string{"app": "reviews"}
	older, newer := sidecar("default", "z-older", app, "./*"), sidecar("default", "a-newer", app, "*/*")
	older.CreationTimestamp = time.Unix(100, 0)
	newer.CreationTimestamp = time.Unix(200, 0)
	pc := scopePush(t, nil, older, newer)
	if c := pc.SidecarFor(scopeProxy("default", app)); c == nil || c.Name != "z-older" {
		t.Fatalf("SidecarFor = %v, want z-older", c)
	}
}

func TestSidecarEgressHosts(t *testing.T) {
	services := func() []*Service {
		return []*Service{
			scopeService("reviews", "default"), scopeService("ratings", "default"),
			scopeService("other", "prod"), scopeService("private", "prod", "."),
			scopeService("istiod", "istio-system"),
			{Hostname: "api.example.com", Name: "api.example.com", Namespace: "istio-system"},
			{Hostname: "www.google.com", Name: "www.google.com", Namespace: "prod"},
		}
	}
	cases := []struct {
		hosts []string
		ns    string
		want  []string
	}{
		{[]string{"./*"}, "default", []string{"ratings.default.svc.cluster.local", "reviews.default.svc.cluster.local"}},
		{[]string{"prod/*"}, "default", []string{"other.prod.svc.cluster.local", "www.google.com"}},
		{[]string{"*/www.google.com"}, "default", []string{"www.google.com"}},
		{[]string{"istio-system/*.example.com"}, "default", []string{"api.example.com"}},
		{[]string{"~/*"}, "default", []string{}},
		{[]string{"./reviews.default.svc.cluster.local", "istio-system/*"}, "default",
			[]string{"api.example.com", "istiod.istio-system.svc.cluster.local", "reviews.default.svc.cluster.local"}},
		// exportTo still applies: prod's private service is not exported to default.
		{[]string{"*/*"}, "default", []string{"api.example.com", "istiod.istio-system.svc.cluster.local", "other.prod.svc.cluster.local",
			"ratings.default.svc.cluster.local", "reviews.default.svc.cluster.local", "www.google.com"}},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.hosts, ","), func(t *testing.T) {
			pc := scopePush(t, services(), sidecar(tc.ns, "sc", nil, tc.hosts...))
			got := hostnames(pc.ServicesFor(scopeProxy(tc.ns, nil)))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("ServicesFor = %v, want %v", got, tc.want)
			}
			for _, h := range tc.want {
				if pc.VisibleService(scopeProxy(tc.ns, nil), h) == nil {
					t.Errorf("VisibleService(%s) = nil", h)
				}
			}
		})
	}
	// Without any Sidecar everything exported is visible, and "." in the
	// root namespace's Sidecar is the proxy's namespace.
	pc := scopePush(t, services())
	if got := pc.ServicesFor(scopeProxy("prod", nil)); len(got) != 7 {
		t.Fatalf("without Sidecar prod sees %v, want all 7", hostnames(got))
	}
	pc = scopePush(t, services(), sidecar("istio-system", "mesh-default", nil, "./*"))
	want := []string{"other.prod.svc.cluster.local", "private.prod.svc.cluster.local", "www.google.com"}
	if got := hostnames(pc.ServicesFor(scopeProxy("prod", nil))); !slices.Equal(got, want) {
		t.Fatalf("root Sidecar ./* from prod = %v, want %v", got, want)
	}
	// A Sidecar without egress selects everything, as in Istio.
	pc = scopePush(t, services(), sidecar("default", "no-egress", nil))
	if got := pc.ServicesFor(scopeProxy("default", nil)); len(got) != 6 {
		t.Fatalf("Sidecar without egress: %v, want the 6 exported services", hostnames(got))
	}
}

func TestSidecarScopeShared(t *testing.T) {
	pc := scopePush(t, []*Service{scopeService("a", "default")}, sidecar("istio-system", "root", nil, "./*"))
	a, b := pc.SidecarScope(scopeProxy("default", map[string]string{"x": "1"})), pc.SidecarScope(scopeProxy("default", nil))
	if a != b {
		t.Fatal("two proxies of one namespace under one Sidecar got different scopes")
	}
	if c := pc.SidecarScope(scopeProxy("prod", nil)); c == a {
		t.Fatal("proxies of different namespaces share a scope under a root Sidecar whose ./ differs")
	}
}

func TestSidecarOutboundTrafficPolicy(t *testing.T) {
	sc := sidecar("default", "sc", nil, "./*")
	sc.Spec.(*networking.Sidecar).OutboundTrafficPolicy = &networking.OutboundTrafficPolicy{Mode: networking.OutboundTrafficPolicy_REGISTRY_ONLY}
	pc := scopePush(t, nil, sc)
	pc.Mesh = &meshconfig.MeshConfig{OutboundTrafficPolicy: &meshconfig.MeshConfig_OutboundTrafficPolicy{Mode: meshconfig.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY}}
	if s := pc.SidecarScope(scopeProxy("default", nil)); s.AllowAny() || s.OutboundTrafficPolicy().GetMode() != meshconfig.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY {
		t.Fatalf("Sidecar REGISTRY_ONLY over mesh ALLOW_ANY: got %v", s.OutboundTrafficPolicy())
	}
	if s := pc.SidecarScope(scopeProxy("prod", nil)); !s.AllowAny() {
		t.Fatal("a proxy without Sidecar must follow the mesh's ALLOW_ANY")
	}
	pc.Mesh = nil
	if s := pc.SidecarScope(scopeProxy("prod", nil)); !s.AllowAny() || s.OutboundTrafficPolicy() != nil {
		t.Fatal("no policy anywhere means ALLOW_ANY")
	}
}

func TestSidecarScopesVirtualServicesAndConfigVisible(t *testing.T) {
	vs := func(ns, name string, hosts ...string) Config {
		return Config{Meta: Meta{Kind: KindVirtualService, Name: name, Namespace: ns}, Spec: &networking.VirtualService{Hosts: hosts}}
	}
	dr := func(ns, name, host string) Config {
		return Config{Meta: Meta{Kind: KindDestinationRule, Name: name, Namespace: ns}, Spec: &networking.DestinationRule{Host: host}}
	}
	services := []*Service{scopeService("reviews", "default"), scopeService("other", "prod")}
	pc := scopePush(t, services,
		sidecar("default", "sc", nil, "./*"),
		vs("default", "reviews", "reviews"), vs("prod", "other", "other"), vs("prod", "wild", "*"),
		dr("default", "reviews", "reviews"), dr("prod", "other", "other"))
	p := scopePush(t, services).SidecarScope(scopeProxy("default", nil))
	if !p.ConfigVisible(ConfigKey{Kind: KindService, Name: "other.prod.svc.cluster.local"}) {
		t.Fatal("without Sidecar every exported service is in scope")
	}
	s := pc.SidecarScope(scopeProxy("default", nil))
	checks := []struct {
		key  ConfigKey
		want bool
	}{
		{ConfigKey{Kind: KindService, Name: "reviews.default.svc.cluster.local"}, true},
		{ConfigKey{Kind: KindEndpoints, Name: "other.prod.svc.cluster.local"}, false},
		{ConfigKey{Kind: KindVirtualService, Name: "reviews", Namespace: "default"}, true},
		{ConfigKey{Kind: KindVirtualService, Name: "other", Namespace: "prod"}, false},
		{ConfigKey{Kind: KindVirtualService, Name: "wild", Namespace: "prod"}, false},
		{ConfigKey{Kind: KindDestinationRule, Name: "reviews", Namespace: "default"}, true},
		{ConfigKey{Kind: KindDestinationRule, Name: "other", Namespace: "prod"}, false},
		{ConfigKey{Kind: KindSidecar, Name: "sc", Namespace: "default"}, true},
		{ConfigKey{Kind: KindSidecar, Name: "sc", Namespace: "prod"}, false},
		{ConfigKey{Kind: KindGateway, Name: "gw", Namespace: "prod"}, true},
	}
	for _, c := range checks {
		if got := s.ConfigVisible(c.key); got != c.want {
			t.Errorf("ConfigVisible(%v) = %v, want %v", c.key, got, c.want)
		}
	}
	if got := pc.VirtualServicesFor(scopeProxy("default", nil), "other.prod.svc.cluster.local"); len(got) != 0 {
		t.Errorf("VirtualServicesFor out-of-scope host = %d configs, want none", len(got))
	}
	if got := pc.VirtualServicesFor(scopeProxy("default", nil), "reviews.default.svc.cluster.local"); len(got) != 1 {
		t.Errorf("VirtualServicesFor in-scope host = %d configs, want 1", len(got))
	}
	if got := pc.VirtualServicesFor(scopeProxy("prod", nil), "other.prod.svc.cluster.local"); len(got) != 2 {
		t.Errorf("VirtualServicesFor without Sidecar = %d configs, want 2 (exact and wildcard)", len(got))
	}
}

func TestSidecarWarningsNameFields(t *testing.T) {
	sc := sidecar("default", "sc", nil, "noslash.example.com")
	spec := sc.Spec.(*networking.Sidecar)
	spec.Ingress = []*networking.IstioIngressListener{{DefaultEndpoint: "127.0.0.1:8080"}}
	spec.Egress[0].Port = &networking.SidecarPort{Protocol: "HTTP"} // no number
	spec.Egress[0].Bind = "unix:///var/run/egress.sock"
	spec.Egress[0].CaptureMode = networking.CaptureMode_NONE
	spec.InboundConnectionPool = &networking.ConnectionPoolSettings{Http: &networking.ConnectionPoolSettings_HTTPSettings{}}
	spec.OutboundTrafficPolicy = &networking.OutboundTrafficPolicy{EgressProxy: &networking.Destination{Host: "egress"}}
	got := scopePush(t, nil, sc).SidecarWarnings()
	for _, field := range []string{"spec.ingress", "spec.egress[0].port", "spec.egress[0].bind", "spec.egress[0].captureMode",
		"spec.inboundConnectionPool.http", "spec.outboundTrafficPolicy.egressProxy", "spec.egress[0].hosts[0]"} {
		found := false
		for _, w := range got {
			if strings.HasPrefix(w, "Sidecar default/sc: "+field+":") {
				found = true
			}
		}
		if !found {
			t.Errorf("no warning names %s in %q", field, got)
		}
	}
	if w := SidecarWarnings(&[]Config{sidecar("default", "ok", nil, "./*")}[0]); len(w) != 0 {
		t.Errorf("supported Sidecar warned: %q", w)
	}
}

// BenchmarkServicesFor measures ServicesFor for proxies of 10 namespaces
// over 1,000 services, with and without a mesh-wide "./*" Sidecar, on a
// PushContext whose scopes are already computed (the steady state of a push).
func BenchmarkServicesFor(b *testing.B) {
	var services []*Service
	for i := range 1000 {
		services = append(services, scopeService(fmt.Sprintf("svc-%d", i), fmt.Sprintf("ns%d", i%10)))
	}
	proxies := make([]*Proxy, 100)
	for i := range proxies {
		proxies[i] = scopeProxy(fmt.Sprintf("ns%d", i%10), map[string]string{"app": fmt.Sprint(i)})
	}
	for _, tc := range []struct {
		name    string
		configs []Config
	}{{"no-sidecar", nil}, {"root-sidecar", []Config{sidecar("istio-system", "default", nil, "./*")}}} {
		b.Run(tc.name, func(b *testing.B) {
			pc := scopePush(b, slices.Clone(services), tc.configs...)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_ = pc.ServicesFor(proxies[i%len(proxies)])
			}
		})
	}
}
