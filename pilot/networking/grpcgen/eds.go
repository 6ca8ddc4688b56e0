package grpcgen

import (
	"net"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
)

// EndpointGenerator builds a ClusterLoadAssignment per outbound cluster.
type EndpointGenerator struct{}

// Generate returns an assignment per requested cluster that exists (empty
// when it has no endpoints), or per cluster of every visible service for a
// wildcard watch.
func (EndpointGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	names, wildcard := requested(w)
	if wildcard {
		names = append(names, allClusterNames(proxy, push)...)
	}
	out := map[string]proto.Message{}
	for _, n := range names {
		if _, done := out[n]; done {
			continue
		}
		if ct, ok := resolveCluster(proxy, push, n); ok {
			out[n] = loadAssignmentFor(proxy, push, n, ct)
		}
	}
	return marshalAll(model.EndpointType, out)
}

// loadAssignmentFor is the assignment of cluster name for proxy: its
// endpoints (see buildLoadAssignment) shaped by the DestinationRule's
// locality load balancing for the proxy's locality and labels as for
// sidecars (see cluster.LocalityLB.Apply), in a form grpc-go accepts:
// priorities run from 0 without gaps (Apply renumbers them), every locality
// keeps a non-zero weight, and localities a distribute rule empties are
// left out (grpc-go would keep them as localities without endpoints).
// Proxyless assignments are not cached: each is built for its proxy.
func loadAssignmentFor(proxy *model.Proxy, push *model.PushContext, name string, ct clusterTarget) *endpointv3.ClusterLoadAssignment {
	cla, labels := buildLoadAssignment(name, reachable(proxy, push, ct))
	lb := cluster.LocalityLBFor(push.Mesh.GetLocalityLbSetting(), ct.rule, ct.subset, ct.port.Port)
	if lb == nil {
		return cla
	}
	lb.Apply(cla, proxy.Locality, proxy.Labels(), labels)
	kept := cla.Endpoints[:0]
	for _, group := range cla.Endpoints {
		if len(group.GetLbEndpoints()) > 0 {
			kept = append(kept, group)
		}
	}
	cla.Endpoints = kept
	return cla
}

// reachable returns the endpoints of the cluster ct that proxy reaches: in
// a multi-network mesh, those of its network directly and the others
// through their networks' gateways (see endpoint.SplitHorizon).
func reachable(proxy *model.Proxy, push *model.PushContext, ct clusterTarget) []*model.Endpoint {
	if push.Endpoints == nil {
		return nil
	}
	var eps []*model.Endpoint
	for _, e := range push.Endpoints.Endpoints(ct.service.Hostname) {
		if e.ServicePortName == ct.port.Name && e.SubsetMatches(ct.labels) {
			eps = append(eps, e)
		}
	}
	return endpoint.SplitHorizon(proxy.Metadata.Network, push.NetworkGateways(), eps)
}

// buildLoadAssignment groups the cluster's endpoints eps by locality. Every
// locality gets a weight (the sum of its endpoints' weights) because grpc-go
// ignores localities without one. Duplicate addresses are dropped: grpc-go
// rejects an assignment that lists an address twice. labels[g][i] are the
// registry labels of cla.Endpoints[g].LbEndpoints[i], with the endpoint's
// network (see model.NetworkLabels).
func buildLoadAssignment(name string, eps []*model.Endpoint) (cla *endpointv3.ClusterLoadAssignment, labels [][]map[string]string) {
	cla = &endpointv3.ClusterLoadAssignment{ClusterName: name}
	groupOf := map[string]int{}
	byLocality := map[string]*endpointv3.LocalityLbEndpoints{}
	weights := map[string]uint32{}
	seen := map[string]bool{}
	for _, e := range eps {
		addr := net.JoinHostPort(e.Address, itoa(e.Port))
		if seen[addr] {
			continue
		}
		seen[addr] = true
		loc := byLocality[e.Locality]
		if loc == nil {
			loc = &endpointv3.LocalityLbEndpoints{Locality: parseLocality(e.Locality)}
			byLocality[e.Locality] = loc
			groupOf[e.Locality] = len(cla.Endpoints)
			cla.Endpoints = append(cla.Endpoints, loc)
			labels = append(labels, nil)
		}
		g := groupOf[e.Locality]
		labels[g] = append(labels[g], model.NetworkLabels(e))
		weight := e.Weight
		if weight == 0 {
			weight = 1
		}
		health := corev3.HealthStatus_HEALTHY
		if !e.Healthy {
			health = corev3.HealthStatus_UNHEALTHY
		}
		loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(e.Address, e.Port),
			}},
			HealthStatus:        health,
			LoadBalancingWeight: wrapperspb.UInt32(weight),
		})
		weights[e.Locality] += weight
	}
	for key, loc := range byLocality {
		loc.LoadBalancingWeight = wrapperspb.UInt32(weights[key])
	}
	return cla, labels
}

// parseLocality is model.ParseLocality, with an empty locality rather
// than none for "": grpc-go needs a locality message on every group.
func parseLocality(s string) *corev3.Locality {
	if l := model.ParseLocality(s); l != nil {
		return l
	}
	return &corev3.Locality{}
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}
