package networkingtest_test

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// snapshot is what one proxy receives, decoded back from the generators' Anys.
type snapshot struct {
	clusters  map[string]*clusterv3.Cluster
	listeners map[string]*listenerv3.Listener
	routes    map[string]*routev3.RouteConfiguration
	endpoints map[string]*endpointv3.ClusterLoadAssignment
}

func decode[T proto.Message](t *testing.T, res model.Resources, newT func() T) map[string]T {
	t.Helper()
	out := map[string]T{}
	for _, r := range res {
		m := newT()
		if err := r.GetResource().UnmarshalTo(m); err != nil {
			t.Fatalf("%s: %v", r.GetName(), err)
		}
		nt.ValidateRecursively(t, m)
		if _, dup := out[r.GetName()]; dup {
			t.Errorf("duplicate resource %s", r.GetName())
		}
		out[r.GetName()] = m
	}
	return out
}

func watch(typeURL string, names []string) *model.WatchedResource {
	w := &model.WatchedResource{TypeURL: typeURL, ResourceNames: map[string]struct{}{}}
	for _, n := range names {
		w.ResourceNames[n] = struct{}{}
	}
	return w
}

// generate runs CDS and LDS, then EDS for every EDS cluster and RDS for
// every route name the listeners reference, as Envoy would subscribe.
func generate(t *testing.T, proxy *model.Proxy, push *model.PushContext) snapshot {
	t.Helper()
	full := &model.PushRequest{Full: true}
	var s snapshot
	cds, err := cluster.Generator{}.Generate(proxy, push, &model.WatchedResource{TypeURL: model.ClusterType, Wildcard: true}, full)
	if err != nil {
		t.Fatal(err)
	}
	s.clusters = decode(t, cds, func() *clusterv3.Cluster { return &clusterv3.Cluster{} })
	lds, err := listener.Generator{}.Generate(proxy, push, &model.WatchedResource{TypeURL: model.ListenerType, Wildcard: true}, full)
	if err != nil {
		t.Fatal(err)
	}
	s.listeners = decode(t, lds, func() *listenerv3.Listener { return &listenerv3.Listener{} })

	var edsNames, rdsNames []string
	for _, c := range s.clusters {
		if c.GetType() == clusterv3.Cluster_EDS {
			edsNames = append(edsNames, c.GetEdsClusterConfig().GetServiceName())
		}
	}
	for _, l := range s.listeners {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var h hcmv3.HttpConnectionManager
				if f.GetTypedConfig().UnmarshalTo(&h) == nil && h.GetRds() != nil {
					rdsNames = append(rdsNames, h.GetRds().GetRouteConfigName())
				}
			}
		}
	}
	eds, err := endpoint.Generator{}.Generate(proxy, push, watch(model.EndpointType, edsNames), full)
	if err != nil {
		t.Fatal(err)
	}
	s.endpoints = decode(t, eds, func() *endpointv3.ClusterLoadAssignment { return &endpointv3.ClusterLoadAssignment{} })
	rds, err := route.Generator{}.Generate(proxy, push, watch(model.RouteType, rdsNames), full)
	if err != nil {
		t.Fatal(err)
	}
	s.routes = decode(t, rds, func() *routev3.RouteConfiguration { return &routev3.RouteConfiguration{} })

	// Consistency: every route targets a cluster we sent.
	for _, rc := range s.routes {
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				targets := []string{r.GetRoute().GetCluster()}
				for _, wc := range r.GetRoute().GetWeightedClusters().GetClusters() {
					targets = append(targets, wc.GetName())
				}
				for _, c := range targets {
					if c != "" && s.clusters[c] == nil {
						t.Errorf("route %s/%s targets unknown cluster %s", rc.GetName(), vh.GetName(), c)
					}
				}
			}
		}
	}
	return s
}

func endpointIPs(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, g := range cla.GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	slices.Sort(out)
	return out
}

func TestBookinfo(t *testing.T) {
	push := nt.Bookinfo(t).PushContext()
	const reviews = "reviews.default.svc.cluster.local"
	for _, workload := range []string{"productpage-v1", "reviews-v1", "ratings-v1"} {
		t.Run(workload, func(t *testing.T) {
			s := generate(t, nt.BookinfoProxy(workload), push)

			for _, name := range []string{
				"outbound|9080||" + reviews, "outbound|9080|v1|" + reviews, "outbound|9080|v2|" + reviews, "outbound|9080|v3|" + reviews,
				"outbound|9080|v1|productpage.default.svc.cluster.local", "outbound|9080|v2-mysql|ratings.default.svc.cluster.local",
				"outbound|9080|v2|details.default.svc.cluster.local", "inbound|9080||", "BlackHoleCluster", "PassthroughCluster",
			} {
				if s.clusters[name] == nil {
					t.Errorf("missing cluster %s", name)
				}
			}
			if got := endpointIPs(s.endpoints["outbound|9080|v1|"+reviews]); !slices.Equal(got, []string{nt.BookinfoPods["reviews-v1"]}) {
				t.Errorf("reviews v1 endpoints %v", got)
			}
			if got := endpointIPs(s.endpoints["outbound|9080||"+reviews]); len(got) != 3 {
				t.Errorf("reviews endpoints %v, want 3", got)
			}
			if got := endpointIPs(s.endpoints["outbound|9080|v2-mysql|ratings.default.svc.cluster.local"]); len(got) != 0 {
				t.Errorf("ratings v2-mysql endpoints %v, want none", got)
			}

			if len(s.listeners) != 3 || s.listeners["0.0.0.0_9080"] == nil {
				t.Errorf("listeners %v, want virtualInbound, virtualOutbound, 0.0.0.0_9080", len(s.listeners))
			}
			var inboundPorts []uint32
			for _, fc := range s.listeners["virtualInbound"].GetFilterChains() {
				inboundPorts = append(inboundPorts, fc.GetFilterChainMatch().GetDestinationPort().GetValue())
			}
			if !slices.Contains(inboundPorts, 9080) {
				t.Errorf("virtualInbound ports %v, want 9080", inboundPorts)
			}

			rc := s.routes["9080"]
			if rc == nil || len(rc.GetVirtualHosts()) != 5 {
				t.Fatalf("route 9080: %v, want 4 services and allow_any", rc)
			}
			var vh *routev3.VirtualHost
			for _, v := range rc.GetVirtualHosts() {
				if v.GetName() == reviews+":9080" {
					vh = v
				}
			}
			// "reviews:9080" matches "reviews": the Host header's port is ignored.
			if vh == nil || !slices.Contains(vh.GetDomains(), "reviews") || !rc.GetIgnorePortInHostMatching() {
				t.Fatalf("reviews virtual host %v (ignore_port_in_host_matching %v)", vh, rc.GetIgnorePortInHostMatching())
			}
			split := vh.GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters()
			if len(split) != 2 || split[0].GetName() != "outbound|9080|v1|"+reviews || split[0].GetWeight().GetValue() != 80 ||
				split[1].GetName() != "outbound|9080|v2|"+reviews || split[1].GetWeight().GetValue() != 20 {
				t.Errorf("reviews split %v, want 80/20 v1/v2", split)
			}
		})
	}
}
