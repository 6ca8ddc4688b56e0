package endpoint_test

import (
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

type lbEp struct {
	addr    string
	port    uint32
	weight  uint32
	healthy bool
}

type group struct {
	locality string
	weight   uint32
	eps      []lbEp
}

func flatten(t *testing.T, cla *endpointv3.ClusterLoadAssignment) []group {
	t.Helper()
	nt.ValidateRecursively(t, cla)
	var out []group
	for _, g := range cla.GetEndpoints() {
		l := g.GetLocality()
		loc := ""
		if l != nil {
			loc = l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone()
		}
		gr := group{locality: loc, weight: g.GetLoadBalancingWeight().GetValue()}
		for _, e := range g.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			gr.eps = append(gr.eps, lbEp{sa.GetAddress(), sa.GetPortValue(), e.GetLoadBalancingWeight().GetValue(), e.GetHealthStatus() == corev3.HealthStatus_HEALTHY})
		}
		out = append(out, gr)
	}
	return out
}

func TestBuildLoadAssignment(t *testing.T) {
	push := nt.Standard().PushContext()
	proxy := nt.Proxy("10.9.9.9", "client", "default", nil)
	v1 := lbEp{nt.ReviewsV1IP, 9081, 1, true}
	v2 := lbEp{nt.ReviewsV2IP, 9081, 3, true}
	v3 := lbEp{nt.ReviewsV3IP, 9081, 1, false}
	cases := []struct {
		name string
		want []group
	}{
		{"outbound|9080||" + nt.ReviewsHost, []group{{"", 2, []lbEp{v1, v3}}, {"region/zone-b/", 3, []lbEp{v2}}}},
		{"outbound|9080|v1|" + nt.ReviewsHost, []group{{"", 1, []lbEp{v1}}}},
		{"outbound|9080|v2|" + nt.ReviewsHost, []group{{"region/zone-b/", 3, []lbEp{v2}}}},
		{"outbound|9080|v3|" + nt.ReviewsHost, []group{{"", 1, []lbEp{v3}}}},
		{"outbound|3306||" + nt.MySQLHost, []group{{"", 1, []lbEp{{"10.2.0.1", 3306, 1, true}}}}},
		{"outbound|9080|v9|" + nt.ReviewsHost, nil},            // unknown subset
		{"outbound|9999||" + nt.ReviewsHost, nil},              // unknown port
		{"outbound|9080||nope.default.svc.cluster.local", nil}, // unknown service
		{"inbound|9081||", nil},
		{"garbage", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cla := endpoint.BuildLoadAssignment(proxy, push, c.name)
			if cla.GetClusterName() != c.name {
				t.Errorf("cluster_name %q", cla.GetClusterName())
			}
			got := flatten(t, cla)
			if !slices.EqualFunc(got, c.want, func(a, b group) bool {
				return a.locality == b.locality && a.weight == b.weight && slices.Equal(a.eps, b.eps)
			}) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestParseLocality(t *testing.T) {
	if model.ParseLocality("") != nil {
		t.Errorf("empty locality not nil")
	}
	l := model.ParseLocality("us/us-east1/a")
	if l.GetRegion() != "us" || l.GetZone() != "us-east1" || l.GetSubZone() != "a" {
		t.Errorf("got %v", l)
	}
	if l := model.ParseLocality("eu"); l.GetRegion() != "eu" || l.GetZone() != "" {
		t.Errorf("got %v", l)
	}
}

func TestGenerator(t *testing.T) {
	push := nt.Standard().PushContext()
	proxy := nt.Proxy("10.9.9.9", "client", "default", nil)
	names := []string{"outbound|9080|v2|" + nt.ReviewsHost, "outbound|3306||" + nt.MySQLHost, "unknown"}
	w := &model.WatchedResource{TypeURL: model.EndpointType, ResourceNames: map[string]struct{}{}}
	for _, n := range names {
		w.ResourceNames[n] = struct{}{}
	}
	res, err := endpoint.Generator{}.Generate(proxy, push, w, model.NewPushRequest(false, model.ReasonEndpointUpdate,
		model.ConfigKey{Kind: model.KindEndpoints, Name: nt.MySQLHost, Namespace: "db"}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res {
		var cla endpointv3.ClusterLoadAssignment
		if err := r.GetResource().UnmarshalTo(&cla); err != nil || cla.ClusterName != r.Name {
			t.Fatalf("%s: %v %q", r.Name, err, cla.ClusterName)
		}
		nt.ValidateRecursively(t, &cla)
		got = append(got, r.Name)
	}
	want := []string{"outbound|3306||" + nt.MySQLHost, "outbound|9080|v2|" + nt.ReviewsHost, "unknown"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("resources %v, want %v (every subscribed name)", got, want)
	}
	part, err := endpoint.Generator{}.GenerateServices(proxy, push, w, map[string]struct{}{nt.ReviewsHost: {}})
	if err != nil || len(part) != 1 || part[0].GetName() != names[0] {
		t.Errorf("GenerateServices(reviews) = %v, %v; want only %s", part, err, names[0])
	}
}

func TestAffectedClusters(t *testing.T) {
	names := []string{"outbound|9080|v2|" + nt.ReviewsHost, "outbound|3306||" + nt.MySQLHost, "outbound|3306|a|" + nt.MySQLHost, "unknown"}
	edsOnly := model.NewPushRequest(false, model.ReasonEndpointUpdate, model.ConfigKey{Kind: model.KindEndpoints, Name: nt.MySQLHost, Namespace: "db"})
	if got, want := endpoint.AffectedClusters(names, edsOnly), names[1:3]; !slices.Equal(got, want) {
		t.Errorf("eds-only: %v, want %v", got, want)
	}
	if got := endpoint.AffectedClusters(names, &model.PushRequest{Full: true}); !slices.Equal(got, names) {
		t.Errorf("full: %v, want all", got)
	}
	if got := endpoint.AffectedClusters(names, model.NewPushRequest(false, model.ReasonEndpointUpdate)); len(got) != 0 {
		t.Errorf("eds-only with no keys: %v, want none", got)
	}
}
