package model

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
)

func TestProtocolFromPort(t *testing.T) {
	cases := []struct {
		name, app string
		want      Protocol
	}{
		{"http", "", ProtocolHTTP},
		{"http-web", "", ProtocolHTTP},
		{"grpc", "", ProtocolGRPC},
		{"grpc-web", "", ProtocolGRPCWeb},
		{"http2-x", "", ProtocolHTTP2},
		{"tcp-db", "", ProtocolTCP},
		{"HTTPS", "", ProtocolHTTPS},
		{"web", "", ProtocolUnsupported},
		{"", "", ProtocolUnsupported},
		{"tcp", "http", ProtocolHTTP},
		{"web", "kubernetes.io/h2c", ProtocolHTTP2},
		{"grpc", "bogus", ProtocolGRPC},
	}
	for _, c := range cases {
		if got := ProtocolFromPort(c.name, c.app); got != c.want {
			t.Errorf("ProtocolFromPort(%q, %q) = %s, want %s", c.name, c.app, got, c.want)
		}
	}
	if !ProtocolGRPC.IsHTTP() || !ProtocolGRPC.IsHTTP2() || ProtocolTCP.IsHTTP() || !ProtocolUnsupported.IsTCP() {
		t.Error("protocol class predicates wrong")
	}
}

func TestParseProxy(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": "bookinfo", "LABELS": map[string]any{"app": "reviews", "version": "v1"},
		"INSTANCE_IPS": "10.0.0.5,fd00::5", "SERVICE_ACCOUNT": "bookinfo-reviews",
		"GENERATOR": "grpc", "ISTIO_VERSION": "1.24.0", "UNKNOWN_KEY": "kept out",
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseProxy(&corev3.Node{Id: "sidecar~10.0.0.5~reviews-v1-abc.bookinfo~bookinfo.svc.cluster.local", Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	if p.Type != SidecarProxy || p.PodName != "reviews-v1-abc" || p.Namespace != "bookinfo" || p.DNSDomain != "bookinfo.svc.cluster.local" {
		t.Errorf("parsed %+v", p)
	}
	if strings.Join(p.IPAddresses, ",") != "10.0.0.5,fd00::5" {
		t.Errorf("IPs %v", p.IPAddresses)
	}
	if p.Labels()["version"] != "v1" || p.Metadata.ServiceAccount != "bookinfo-reviews" || !p.IsGRPC() || p.Metadata.IstioVersion != "1.24.0" {
		t.Errorf("metadata %+v", p.Metadata)
	}

	bad := map[string]string{
		"":                            "want 4 fields",
		"sidecar~10.0.0.1~a.b":        "want 4 fields",
		"gateway~10.0.0.1~a.b~b.svc":  "not sidecar or router",
		"sidecar~not-an-ip~a.b~b.svc": "IP",
	}
	for id, want := range bad {
		_, err := ParseProxy(&corev3.Node{Id: id})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "node.id") {
			t.Errorf("ParseProxy(%q) error %v, want one naming node.id and %q", id, err, want)
		}
	}
	if _, err := ParseProxy(nil); err == nil {
		t.Error("nil node accepted")
	}
}

func TestPushRequestMerge(t *testing.T) {
	a := NewPushRequest(false, ReasonEndpointUpdate, ConfigKey{Kind: KindEndpoints, Name: "a"})
	b := NewPushRequest(true, ReasonConfigUpdate, ConfigKey{Kind: KindVirtualService, Name: "vs"})
	m := a.Merge(b)
	if !m.Full || len(m.ConfigsUpdated) != 2 || m.Reason[ReasonEndpointUpdate] != 1 || m.Reason[ReasonConfigUpdate] != 1 {
		t.Fatalf("merge %+v", m)
	}
	if !m.Start.Equal(a.Start) {
		t.Error("merged start is not the earliest")
	}
	if len(a.ConfigsUpdated) != 1 || a.Full {
		t.Error("merge mutated its receiver")
	}
	all := &PushRequest{Full: true}
	if got := m.Merge(all); got.ConfigsUpdated != nil || !got.Updated(KindSidecar) {
		t.Error("a full push of everything must stay 'everything' after a merge")
	}
	if (*PushRequest)(nil).Merge(a) != a || a.Merge(nil) != a {
		t.Error("nil merge")
	}
}

func TestEndpointIndex(t *testing.T) {
	x := NewEndpointIndex()
	e1 := &Endpoint{Address: "10.0.0.2", Port: 80, ServicePortName: "http", Healthy: true}
	e2 := &Endpoint{Address: "10.0.0.1", Port: 80, ServicePortName: "http", Healthy: true}
	if !x.Update("k8s", "a.ns.svc", []*Endpoint{e1, e2}) {
		t.Fatal("first update reported no change")
	}
	if x.Update("k8s", "a.ns.svc", []*Endpoint{{Address: "10.0.0.1", Port: 80, ServicePortName: "http", Healthy: true}, e1}) {
		t.Fatal("same endpoints in another order reported as a change")
	}
	got := x.Endpoints("a.ns.svc")
	if len(got) != 2 || got[0].Address != "10.0.0.1" {
		t.Fatalf("not sorted: %v", got)
	}
	x.Update("se", "a.ns.svc", []*Endpoint{{Address: "10.0.0.3", Port: 80, ServicePortName: "http"}})
	if len(x.Endpoints("a.ns.svc")) != 3 || len(x.ByAddress("10.0.0.3")["a.ns.svc"]) != 1 {
		t.Fatal("shards not merged")
	}
	if hosts := x.DeleteShard("se"); len(hosts) != 1 || len(x.Endpoints("a.ns.svc")) != 2 {
		t.Fatalf("DeleteShard: %v", hosts)
	}
	x.Update("k8s", "a.ns.svc", nil)
	if x.Endpoints("a.ns.svc") != nil {
		t.Fatal("endpoints not removed")
	}
}

type fakeRegistry []*Service

func (f fakeRegistry) Services() []*Service { return f }

type fakeStore map[Kind][]Config

func (f fakeStore) List(k Kind) []Config { return f[k] }

func dr(ns, name, host string, exportTo ...string) Config {
	return Config{Meta: Meta{Kind: KindDestinationRule, Name: name, Namespace: ns},
		Spec: &networking.DestinationRule{Host: host, ExportTo: exportTo}}
}

func TestDestinationRulePrecedence(t *testing.T) {
	svc := &Service{Hostname: "reviews.bookinfo.svc.cluster.local", Namespace: "bookinfo"}
	store := fakeStore{KindDestinationRule: {
		dr("bookinfo", "svc-ns", "reviews"),
		dr("client", "client-ns", "reviews.bookinfo.svc.cluster.local"),
		dr("istio-system", "root", "*.cluster.local"),
		dr("private", "hidden", "reviews.bookinfo.svc.cluster.local", "."),
	}}
	pc := NewPushContext(&Environment{ServiceDiscovery: fakeRegistry{svc}, ConfigStore: store, Endpoints: NewEndpointIndex(), DomainSuffix: "cluster.local"}, nil, nil)
	for proxyNS, want := range map[string]string{"client": "client-ns", "bookinfo": "svc-ns", "other": "svc-ns", "private": "hidden"} {
		if got := pc.DestinationRule(proxyNS, svc); got == nil || got.Name != want {
			t.Errorf("proxy in %s got %v, want %s", proxyNS, got, want)
		}
	}
	other := &Service{Hostname: "ratings.x.svc.cluster.local", Namespace: "x"}
	if got := pc.DestinationRule("client", other); got == nil || got.Name != "root" {
		t.Errorf("root namespace wildcard rule not found: %v", got)
	}
}

func TestVirtualServicesForAndIncrementalRebuild(t *testing.T) {
	svc := &Service{Hostname: "reviews.default.svc.cluster.local", Namespace: "default"}
	vs := Config{Meta: Meta{Kind: KindVirtualService, Name: "reviews", Namespace: "default"}, Spec: &networking.VirtualService{Hosts: []string{"reviews"}}}
	gw := Config{Meta: Meta{Kind: KindVirtualService, Name: "gw-only", Namespace: "default"}, Spec: &networking.VirtualService{Hosts: []string{"reviews"}, Gateways: []string{"bookinfo-gateway"}}}
	wild := Config{Meta: Meta{Kind: KindVirtualService, Name: "wild", Namespace: "default"}, Spec: &networking.VirtualService{Hosts: []string{"*.svc.cluster.local"}}}
	store := fakeStore{KindVirtualService: {vs, gw, wild}}
	env := &Environment{ServiceDiscovery: fakeRegistry{svc}, ConfigStore: store, Endpoints: NewEndpointIndex(), DomainSuffix: "cluster.local"}
	pc := NewPushContext(env, nil, nil)
	proxy := &Proxy{Namespace: "default"}
	var names []string
	for _, c := range pc.VirtualServicesFor(proxy, svc.Hostname) {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "reviews,wild" {
		t.Fatalf("VirtualServicesFor = %v", names)
	}
	// A VirtualService-only change reuses the service index.
	next := NewPushContext(env, pc, NewPushRequest(true, ReasonConfigUpdate, ConfigKey{Kind: KindVirtualService, Name: "reviews", Namespace: "default"}))
	if &next.Services()[0] != &pc.Services()[0] {
		t.Error("service index rebuilt for a VirtualService-only change")
	}
	if next.Version == pc.Version {
		t.Error("new PushContext kept the old version")
	}
}

// TestVirtualServicesForConsumerFirst: for a client in team, the
// VirtualService private to team (a consumer's mesh route) comes before
// one exported to team by name and the public (producer's) one, whatever
// their age; a client elsewhere sees only the public one.
func TestVirtualServicesForConsumerFirst(t *testing.T) {
	svc := &Service{Hostname: "web.default.svc.cluster.local", Namespace: "default"}
	at := func(ns, name string, age int, exportTo ...string) Config {
		return Config{Meta: Meta{Kind: KindVirtualService, Name: name, Namespace: ns, CreationTimestamp: time.Unix(int64(age), 0)},
			Spec: &networking.VirtualService{Hosts: []string{svc.Hostname}, ExportTo: exportTo}}
	}
	store := fakeStore{KindVirtualService: {
		at("default", "producer", 1, "*"),
		at("default", "to-team", 2, "team"),
		at("team", "consumer", 3, "."),
	}}
	env := &Environment{ServiceDiscovery: fakeRegistry{svc}, ConfigStore: store, Endpoints: NewEndpointIndex(), DomainSuffix: "cluster.local"}
	pc := NewPushContext(env, nil, nil)
	names := func(ns string) string {
		var out []string
		for _, c := range pc.VirtualServicesFor(&Proxy{Namespace: ns}, svc.Hostname) {
			out = append(out, c.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names("team"); got != "consumer,to-team,producer" {
		t.Errorf("client in team: %s, want consumer,to-team,producer", got)
	}
	if got := names("other"); got != "producer" {
		t.Errorf("client in other: %s, want producer", got)
	}
}

func syntheticEnv(n int) *Environment {
	var svcs []*Service
	var vss, drs []Config
	for i := range n {
		ns := fmt.Sprintf("ns%d", i%10)
		host := fmt.Sprintf("svc%d.%s.svc.cluster.local", i, ns)
		svcs = append(svcs, &Service{Hostname: host, Namespace: ns, Name: fmt.Sprintf("svc%d", i), Address: fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
			Ports: []Port{{Name: "http", Port: 8080, Protocol: ProtocolHTTP}}})
		vss = append(vss, Config{Meta: Meta{Kind: KindVirtualService, Name: fmt.Sprintf("vs%d", i), Namespace: ns}, Spec: &networking.VirtualService{Hosts: []string{host}}})
		drs = append(drs, Config{Meta: Meta{Kind: KindDestinationRule, Name: fmt.Sprintf("dr%d", i), Namespace: ns}, Spec: &networking.DestinationRule{Host: host}})
	}
	sort.Slice(svcs, func(i, j int) bool { return svcs[i].Hostname < svcs[j].Hostname })
	return &Environment{ServiceDiscovery: fakeRegistry(svcs), ConfigStore: fakeStore{KindVirtualService: vss, KindDestinationRule: drs},
		Endpoints: NewEndpointIndex(), DomainSuffix: "cluster.local"}
}

// BenchmarkPushContext measures a full PushContext build: services, one
// VirtualService and one DestinationRule per service.
func BenchmarkPushContext(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			env := syntheticEnv(n)
			b.ReportAllocs()
			for b.Loop() {
				NewPushContext(env, nil, nil)
			}
		})
	}
}
