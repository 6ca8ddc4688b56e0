package explain_test

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/explain"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// TestRoutesAgreeWithGenerator: for every route configuration case, the
// explained virtual hosts, routes and (undropped) destination clusters
// are exactly those of the RDS generator's resource, which passes
// ValidateAll.
func TestRoutesAgreeWithGenerator(t *testing.T) {
	for _, tc := range goldenCases {
		if tc.typ != "rds" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			push, proxy := bookinfo(t, tc.configs, tc.workload)
			w := &model.WatchedResource{TypeURL: model.RouteType, ResourceNames: map[string]struct{}{tc.resource: {}}}
			res, err := route.Generator{}.Generate(proxy, push, w, nil)
			if err != nil || len(res) != 1 {
				t.Fatalf("generate: %v, %d resources", err, len(res))
			}
			rc := &routev3.RouteConfiguration{}
			if err := res[0].GetResource().UnmarshalTo(rc); err != nil {
				t.Fatal(err)
			}
			if err := rc.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			e, err := explain.Explain(proxy, push, tc.typ, tc.resource)
			if err != nil {
				t.Fatal(err)
			}
			if len(e.Routes.VirtualHosts) != len(rc.GetVirtualHosts()) {
				t.Fatalf("%d virtual hosts explained, %d generated", len(e.Routes.VirtualHosts), len(rc.GetVirtualHosts()))
			}
			for i, vh := range rc.GetVirtualHosts() {
				ev := e.Routes.VirtualHosts[i]
				if ev.Name != vh.GetName() || len(ev.Routes) != len(vh.GetRoutes()) {
					t.Fatalf("virtual host %d: explained %s with %d routes, generated %s with %d", i, ev.Name, len(ev.Routes), vh.GetName(), len(vh.GetRoutes()))
				}
				for j, r := range vh.GetRoutes() {
					want := generatedClusters(r)
					var got []string
					for _, d := range ev.Routes[j].Destinations {
						if d.Dropped == "" {
							got = append(got, d.Cluster)
						}
					}
					if len(got) != len(want) {
						t.Fatalf("%s route %d: explained %v, generated %v", vh.GetName(), j, got, want)
					}
					for k := range got {
						if got[k] != want[k] {
							t.Errorf("%s route %d: explained %v, generated %v", vh.GetName(), j, got, want)
						}
					}
				}
			}
		})
	}
}

func generatedClusters(r *routev3.Route) []string {
	if c := r.GetRoute().GetCluster(); c != "" {
		return []string{c}
	}
	var out []string
	for _, w := range r.GetRoute().GetWeightedClusters().GetClusters() {
		out = append(out, w.GetName())
	}
	return out
}
