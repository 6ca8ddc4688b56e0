package networkingtest_test

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// generateAll returns name → marshalled bytes of every type for proxy, and
// checks each resource's Version is the hash of its bytes.
func generateAll(t *testing.T, proxy *model.Proxy, push *model.PushContext) map[string][]byte {
	t.Helper()
	full := &model.PushRequest{Full: true}
	out := map[string][]byte{}
	add := func(prefix string, res model.Resources, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.GetVersion() != model.ResourceVersion(r.GetResource().GetValue()) {
				t.Errorf("%s %s: version %q is not the hash of its bytes", prefix, r.GetName(), r.GetVersion())
			}
			out[prefix+r.GetName()] = r.GetResource().GetValue()
		}
	}
	cds, err := cluster.Generator{}.Generate(proxy, push, &model.WatchedResource{TypeURL: model.ClusterType, Wildcard: true}, full)
	add("cds/", cds, err)
	var edsNames []string
	for _, r := range cds {
		var c clusterv3.Cluster
		if err := r.GetResource().UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		if c.GetType() == clusterv3.Cluster_EDS {
			edsNames = append(edsNames, c.GetName())
		}
	}
	// A name no cluster has: answered empty, never cached.
	edsNames = append(edsNames, "outbound|1|x|nope.example.com")
	eds, err := endpoint.Generator{}.Generate(proxy, push, watch(model.EndpointType, edsNames), full)
	add("eds/", eds, err)
	lds, err := listener.Generator{}.Generate(proxy, push, &model.WatchedResource{TypeURL: model.ListenerType, Wildcard: true}, full)
	add("lds/", lds, err)
	rds, err := route.Generator{}.Generate(proxy, push, watch(model.RouteType, []string{"8080", "9080", "80", "9000"}), full)
	add("rds/", rds, err)
	return out
}

// sameResources checks got holds exactly the resources of want, byte for
// byte. An empty want fails: equality with nothing proves nothing about
// the build under test.
func sameResources(t testing.TB, what string, got, want map[string][]byte) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: the expected resource set is empty, so the comparison would prove nothing; build input that yields resources", what)
		return
	}
	var names []string
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if g, ok := got[n]; !ok {
			t.Errorf("%s: %s missing", what, n)
		} else if !bytes.Equal(g, want[n]) {
			t.Errorf("%s: %s differs from the uncached build", what, n)
		}
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			t.Errorf("%s: unexpected %s", what, n)
		}
	}
}

// failures is a testing.TB that records failures instead of failing.
type failures struct {
	testing.TB
	msgs []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}
func (f *failures) Fatalf(format string, args ...any) { f.Errorf(format, args...) }

// TestSameResourcesRejectsEmptyWant: an empty expectation fails, even
// against an empty result, instead of passing vacuously.
func TestSameResourcesRejectsEmptyWant(t *testing.T) {
	for _, got := range []map[string][]byte{nil, {"cds/a": []byte("a")}} {
		f := &failures{TB: t}
		sameResources(f, "empty", got, nil)
		if len(f.msgs) != 1 || !strings.Contains(f.msgs[0], "expected resource set is empty") {
			t.Errorf("empty want, %d got: failures %q, want one saying the expected set is empty", len(got), f.msgs)
		}
	}
	f := &failures{TB: t}
	sameResources(f, "same", map[string][]byte{"cds/a": []byte("a")}, map[string][]byte{"cds/a": []byte("a")})
	if len(f.msgs) != 0 {
		t.Errorf("equal sets: failures %q, want none", f.msgs)
	}
}

// scaleProxies are sidecars in several namespaces: routes and rules differ
// between namespaces, so cached entries must not leak across them.
func scaleProxies() []*model.Proxy {
	return []*model.Proxy{
		nt.ScaleProxy(),
		nt.Proxy("10.200.0.1", "svc-1-pod", "ns1", map[string]string{"app": "svc-1", "version": "v1"}),
		nt.Proxy("10.9.9.9", "client", "ns0", nil),
		nt.Proxy("10.9.9.8", "client", "ns5", map[string]string{"app": "client"}),
	}
}

// TestCachedEqualsUncached generates for several proxies with a shared
// cache, cold then warm, and compares every resource with an uncached build.
func TestCachedEqualsUncached(t *testing.T) {
	in := nt.Scale(60)
	// A namespace-local rule that overrides the service's own for ns5 proxies.
	in.Configs = append(in.Configs, model.Config{
		Meta: model.Meta{Kind: model.KindDestinationRule, Name: "local", Namespace: "ns5"},
		Spec: &networking.DestinationRule{Host: "svc-0.ns0.svc.cluster.local", ExportTo: []string{"."}, Subsets: []*networking.Subset{
			{Name: "only", Labels: map[string]string{"version": "v2"}},
		}},
	})
	uncached := in.PushContext()
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	cached := in.PushContext()
	for round, what := range []string{"cold", "warm"} {
		for _, p := range scaleProxies() {
			sameResources(t, what+" "+p.ID, generateAll(t, p, cached), generateAll(t, p, uncached))
		}
		if round == 0 && in.Cache.Len() == 0 {
			t.Fatal("nothing was cached")
		}
	}
}

// TestCacheInvalidation changes a service, a DestinationRule, a
// VirtualService and endpoints, invalidates by the keys a source would
// report, and checks the cached output equals a fresh uncached build.
func TestCacheInvalidation(t *testing.T) {
	in := nt.Scale(30)
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	env := in.Environment()
	push := model.NewPushContext(env, nil, nil)
	for _, p := range scaleProxies() {
		generateAll(t, p, push) // fill the cache
	}

	next := nt.Scale(30)
	svc := *next.Services[3]
	svc.Ports = append([]model.Port(nil), svc.Ports...)
	svc.Ports[0].Port = 8081
	next.Services[3] = &svc
	for i, c := range next.Configs {
		switch {
		case c.Kind == model.KindDestinationRule && c.Name == "svc-5":
			dr := proto.Clone(c.Spec).(*networking.DestinationRule)
			dr.Subsets = dr.Subsets[:1]
			next.Configs[i].Spec = dr
		case c.Kind == model.KindVirtualService && c.Name == "svc-10":
			next.Configs[i].Spec = &networking.VirtualService{Hosts: []string{"svc-10"}, Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "svc-10", Subset: "v2"}}},
			}}}
		}
	}
	next.Endpoints["svc-7.ns7.svc.cluster.local"] = next.Endpoints["svc-7.ns7.svc.cluster.local"][:1]
	nextEnv := next.Environment()
	env.ServiceDiscovery, env.ConfigStore = nextEnv.ServiceDiscovery, nextEnv.ConfigStore
	env.Endpoints.Update("test", "svc-7.ns7.svc.cluster.local", next.Endpoints["svc-7.ns7.svc.cluster.local"])

	req := model.NewPushRequest(true, model.ReasonConfigUpdate,
		model.ConfigKey{Kind: model.KindService, Name: svc.Hostname, Namespace: svc.Namespace},
		model.ConfigKey{Kind: model.KindDestinationRule, Name: "svc-5", Namespace: "ns5"},
		model.ConfigKey{Kind: model.KindVirtualService, Name: "svc-10", Namespace: "ns0"},
		model.ConfigKey{Kind: model.KindEndpoints, Name: "svc-7.ns7.svc.cluster.local", Namespace: "ns7"})
	in.Cache.Invalidate(req)
	// A generator still holding the old snapshot must not store into the cache.
	before := in.Cache.Len()
	generateAll(t, scaleProxies()[3], push)
	if in.Cache.Len() != before {
		t.Errorf("resources from a PushContext older than the invalidation were stored: %d → %d entries", before, in.Cache.Len())
	}
	pushed := model.NewPushContext(env, push, req)
	fresh := next.PushContext()
	for _, p := range scaleProxies() {
		sameResources(t, "after change "+p.ID, generateAll(t, p, pushed), generateAll(t, p, fresh))
	}
}

// TestGenerateServicesIsASubset checks the partial generators return
// exactly the full output's resources of the requested hosts, clusters an
// EnvoyFilter adds under a name of one of them included.
func TestGenerateServicesIsASubset(t *testing.T) {
	in := nt.Scale(40)
	in.Configs = append(in.Configs, addedClusterFilter(t, "outbound|80||gone.ns0.svc.cluster.local"))
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	push := in.PushContext()
	hosts := map[string]struct{}{"svc-3.ns3.svc.cluster.local": {}, "svc-10.ns0.svc.cluster.local": {}, "gone.ns0.svc.cluster.local": {}}
	full := &model.PushRequest{Full: true}
	for _, p := range scaleProxies() {
		for _, tc := range []struct {
			gen model.PartialGenerator
			w   *model.WatchedResource
		}{
			{cluster.Generator{}, &model.WatchedResource{TypeURL: model.ClusterType, Wildcard: true}},
			{endpoint.Generator{}, watch(model.EndpointType, []string{
				"outbound|8080||svc-3.ns3.svc.cluster.local", "outbound|8080|v1|svc-10.ns0.svc.cluster.local",
				"outbound|8080||svc-4.ns4.svc.cluster.local", "outbound|80||gone.ns0.svc.cluster.local",
			})},
		} {
			all, err := tc.gen.Generate(p, push, tc.w, full)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]byte{}
			for _, r := range all {
				if _, ok := hosts[model.ResourceHost(r.GetName())]; ok {
					want[r.GetName()] = r.GetResource().GetValue()
				}
			}
			part, err := tc.gen.GenerateServices(p, push, tc.w, hosts)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]byte{}
			for _, r := range part {
				got[r.GetName()] = r.GetResource().GetValue()
			}
			sameResources(t, tc.w.TypeURL+" "+p.ID, got, want)
		}
	}
}

// addedClusterFilter is a mesh-wide EnvoyFilter adding a STATIC cluster name.
func addedClusterFilter(t testing.TB, name string) model.Config {
	t.Helper()
	return nt.EnvoyFilter(t, "istio-system", "added-cluster", `
configPatches:
- applyTo: CLUSTER
  patch:
    operation: ADD
    value:
      name: "`+name+`"
      type: STATIC
      connect_timeout: 1s
      load_assignment: {cluster_name: "`+name+`", endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.9.9.9, port_value: 80}}}}]}]}
`)
}
