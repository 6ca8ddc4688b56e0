package nametable

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/internal/nds"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

func standard() (*model.PushContext, model.AutoVIP, model.AutoVIP) {
	in := networkingtest.Standard()
	// A ServiceEntry with an address, one of resolution NONE with
	// endpoints, and a wildcard one.
	in.Services = append(in.Services,
		&model.Service{Hostname: "db.example.com", Name: "db.example.com", Namespace: "default", Address: "192.0.2.5",
			Ports: []model.Port{{Name: "tcp", Port: 5432}}, Resolution: model.ClientSideLB, Registry: model.RegistryServiceEntry},
		&model.Service{Hostname: "none.example.com", Name: "none.example.com", Namespace: "default",
			Ports: []model.Port{{Name: "tcp", Port: 1}}, Resolution: model.Passthrough, Registry: model.RegistryServiceEntry},
		&model.Service{Hostname: "*.wild.example.com", Name: "*.wild.example.com", Namespace: "default",
			Ports: []model.Port{{Name: "http", Port: 80}}, Resolution: model.DNSLB, Registry: model.RegistryServiceEntry},
	)
	// StatefulSet pods have DNS names (endpoints[].hostname); an unready
	// one is left out.
	in.Endpoints[networkingtest.StatefulHost][0].HostName = "stateful-0"
	stateful2 := networkingtest.Endpoint("10.3.0.2", 5432, "tcp-pg", nil)
	stateful2.Healthy = false
	stateful2.HostName = "stateful-1"
	in.Endpoints[networkingtest.StatefulHost] = append(in.Endpoints[networkingtest.StatefulHost], stateful2)
	in.Endpoints["none.example.com"] = []*model.Endpoint{networkingtest.Endpoint("192.0.2.9", 1, "tcp", nil)}
	push := in.PushContext()
	ext, _ := push.AutoAllocatedVIP(networkingtest.ExternalHost)
	mongo, _ := push.AutoAllocatedVIP(networkingtest.MongoExtHost)
	return push, ext, mongo
}

func TestBuild(t *testing.T) {
	push, ext, mongo := standard()
	if ext.IPv4 == "" || mongo.IPv4 == "" || ext == mongo {
		t.Fatalf("auto-allocated VIPs: external %+v, mongo %+v", ext, mongo)
	}
	kube := func(ip, name, ns string) nds.NameInfo {
		return nds.NameInfo{IPs: []string{ip}, Registry: "Kubernetes", Shortname: name, Namespace: ns}
	}
	base := nds.NameTable{
		networkingtest.ReviewsHost:                      kube(networkingtest.ReviewsVIP, "reviews", "default"),
		networkingtest.GreeterHost:                      kube(networkingtest.GreeterVIP, "greeter", "default"),
		networkingtest.MySQLHost:                        kube(networkingtest.MySQLVIP, "mysql", "db"),
		networkingtest.StatefulHost:                     kube("10.3.0.1", "stateful", "default"), // headless: ready endpoints
		"stateful-0.stateful.default.svc.cluster.local": kube("10.3.0.1", "stateful-0.stateful", "default"),
		"db.example.com":                                {IPs: []string{"192.0.2.5"}, Registry: "External"},
		"none.example.com":                              {IPs: []string{"192.0.2.9"}, Registry: "External"},
	}
	withVIPs := func(v6 bool) nds.NameTable {
		out := nds.NameTable{}
		for k, v := range base {
			out[k] = v
		}
		for h, v := range map[string]model.AutoVIP{networkingtest.ExternalHost: ext, networkingtest.MongoExtHost: mongo} {
			ips := []string{v.IPv4}
			if v6 {
				ips = append(ips, v.IPv6)
			}
			out[h] = nds.NameInfo{IPs: ips, Registry: "External"}
		}
		return out
	}
	proxy := func(capture, auto bool, ips ...string) *model.Proxy {
		p := networkingtest.Proxy(networkingtest.StandardProxy, "reviews-v1", "default", map[string]string{"app": "reviews"})
		p.Metadata.DNSCapture, p.Metadata.DNSAutoAllocate = capture, auto
		if len(ips) > 0 {
			p.IPAddresses = ips
		}
		return p
	}
	for _, tc := range []struct {
		name  string
		proxy *model.Proxy
		want  nds.NameTable
	}{
		{"no auto-allocation", proxy(true, false), base},
		{"auto-allocate without capture", proxy(false, true), base},
		{"capture and auto-allocate", proxy(true, true), withVIPs(false)},
		{"dual stack", proxy(true, true, "10.1.0.1", "fd00::1"), withVIPs(true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Build(tc.proxy, push)); diff != "" {
				t.Errorf("name table (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGenerateDecodes(t *testing.T) {
	push, _, _ := standard()
	g, err := New()
	if err != nil {
		t.Fatal(err)
	}
	p := networkingtest.Proxy(networkingtest.StandardProxy, "reviews-v1", "default", nil)
	p.Metadata.DNSCapture, p.Metadata.DNSAutoAllocate = true, true
	res, err := g.Generate(p, push, &model.WatchedResource{TypeURL: model.NameTableType}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].GetResource().GetTypeUrl() != model.NameTableType {
		t.Fatalf("want one NameTable resource, got %v", res)
	}
	d, _ := nds.NewDescriptors()
	got, err := d.UnmarshalAny(res[0].GetResource())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Build(p, push), got); diff != "" {
		t.Errorf("decoded (-built +decoded):\n%s", diff)
	}
	if _, err := (Generator{}).Generate(p, push, nil, nil); err == nil {
		t.Error("zero Generator: want an error")
	}
}

// TestCache: sidecars of a namespace share one cached table; asking for
// auto-allocated VIPs, another namespace or another IP family keys its own;
// a service change drops the tables, and a cached table always equals an
// uncached build.
func TestCache(t *testing.T) {
	in := networkingtest.Standard()
	var hits, misses int
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{OnRead: func(hit bool) {
		if hit {
			hits++
		} else {
			misses++
		}
	}})
	env := in.Environment()
	push := model.NewPushContext(env, nil, nil)
	uncachedIn := in
	uncachedIn.Cache = nil
	uncached := uncachedIn.PushContext()
	g, err := New()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := nds.NewDescriptors()
	table := func(p *model.Proxy, push *model.PushContext) nds.NameTable {
		t.Helper()
		res, err := g.Generate(p, push, &model.WatchedResource{TypeURL: model.NameTableType}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.UnmarshalAny(res[0].GetResource())
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	vips := func(p *model.Proxy) *model.Proxy {
		p.Metadata.DNSCapture, p.Metadata.DNSAutoAllocate = true, true
		return p
	}
	proxies := []*model.Proxy{
		networkingtest.Proxy("10.1.0.1", "a", "default", nil),
		networkingtest.Proxy("10.1.0.2", "b", "default", nil),       // shares a's
		vips(networkingtest.Proxy("10.1.0.3", "c", "default", nil)), // its own
		vips(networkingtest.Proxy("10.1.0.4", "d", "default", nil)), // shares c's
		vips(networkingtest.Proxy("fd00::5", "e", "default", nil)),  // IPv6: its own
		networkingtest.Proxy("10.1.0.6", "f", "db", nil),            // another namespace
	}
	for _, p := range proxies {
		if diff := cmp.Diff(table(p, uncached), table(p, push)); diff != "" {
			t.Errorf("%s: cached table differs from uncached (-uncached +cached):\n%s", p.ID, diff)
		}
	}
	// Four tables are built (a, c, e, f) and the headless service's
	// entries once (with a's table): hits are b's and d's tables and the
	// headless entries for c, e and f.
	if hits != 5 || misses != 5 {
		t.Errorf("%d hits, %d misses; want 5 and 5", hits, misses)
	}
	n := in.Cache.Len()
	in.Cache.Invalidate(model.NewPushRequest(true, model.ReasonServiceUpdate, model.ConfigKey{Kind: model.KindService, Name: networkingtest.ReviewsHost, Namespace: "default"}))
	if in.Cache.Len() != n-4 {
		t.Errorf("a service change left %d of %d cached entries, want the headless entries alone", in.Cache.Len(), n)
	}
}

// TestCacheHeadlessEndpoints: an endpoint-only change of a headless
// service drops its cached entries and every table listing them, and the
// tables then built hold the new endpoints; an endpoint change of a
// ClusterIP service drops nothing.
func TestCacheHeadlessEndpoints(t *testing.T) {
	in := networkingtest.Standard()
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	env := in.Environment()
	push := model.NewPushContext(env, nil, nil)
	g, err := New()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := nds.NewDescriptors()
	p := networkingtest.Proxy("10.1.0.1", "a", "default", nil)
	table := func() nds.NameTable {
		t.Helper()
		res, err := g.Generate(p, push, &model.WatchedResource{TypeURL: model.NameTableType}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.UnmarshalAny(res[0].GetResource())
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	before := table()
	n := in.Cache.Len()
	in.Cache.Invalidate(model.NewPushRequest(false, model.ReasonEndpointUpdate, model.ConfigKey{Kind: model.KindEndpoints, Name: networkingtest.ReviewsHost, Namespace: "default"}))
	if in.Cache.Len() != n {
		t.Errorf("a ClusterIP endpoint change dropped %d cached entries", n-in.Cache.Len())
	}
	ep := *env.Endpoints.Endpoints(networkingtest.StatefulHost)[0]
	ep.Address, ep.HostName = "10.3.9.9", "stateful-9"
	env.Endpoints.Update("test", networkingtest.StatefulHost, []*model.Endpoint{&ep})
	in.Cache.Invalidate(model.NewPushRequest(false, model.ReasonEndpointUpdate, model.ConfigKey{Kind: model.KindEndpoints, Name: networkingtest.StatefulHost, Namespace: "default"}))
	if in.Cache.Len() != n-2 {
		t.Errorf("a headless endpoint change left %d of %d cached entries, want the table and the headless entries dropped", in.Cache.Len(), n)
	}
	after := table()
	if got := after[networkingtest.StatefulHost].IPs; !slices.Equal(got, []string{"10.3.9.9"}) {
		t.Errorf("after the change the headless service resolves to %v, want [10.3.9.9] (before: %v)", got, before[networkingtest.StatefulHost].IPs)
	}
	if _, ok := after["stateful-9.stateful.default.svc.cluster.local"]; !ok {
		t.Errorf("after the change the table lacks the new pod's name: %v", after)
	}
	if diff := cmp.Diff(Build(p, push), after); diff != "" {
		t.Errorf("cached table differs from Build (-build +cached):\n%s", diff)
	}
}
