package grpcgen

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// ClusterGenerator builds EDS clusters "outbound|PORT|SUBSET|FQDN": one per
// port of each visible service and one more per DestinationRule subset.
type ClusterGenerator struct{}

// Generate returns the requested clusters that exist (unknown names are
// omitted), or every cluster of every visible service for a wildcard watch.
func (ClusterGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	out := map[string]proto.Message{}
	names, wildcard := requested(w)
	if wildcard {
		for _, n := range allClusterNames(proxy, push) {
			out[n] = buildCluster(n)
		}
	}
	for _, n := range names {
		if _, ok := resolveCluster(proxy, push, n); ok {
			out[n] = buildCluster(n)
		}
	}
	return marshalAll(model.ClusterType, out)
}

// allClusterNames lists the clusters of every port and subset of every visible service.
func allClusterNames(proxy *model.Proxy, push *model.PushContext) []string {
	var out []string
	for _, svc := range push.ServicesFor(proxy) {
		for _, p := range svc.Ports {
			for _, subset := range subsetNames(proxy, push, svc) {
				out = append(out, clusterName(p.Port, subset, svc.Hostname))
			}
		}
	}
	return out
}

// subsetNames lists "" (the whole service) and the DestinationRule's subsets.
func subsetNames(proxy *model.Proxy, push *model.PushContext, svc *model.Service) []string {
	out := []string{""}
	if dr := push.DestinationRule(proxy.ConfigNamespace(), svc); dr != nil {
		for _, s := range dr.Spec.(*networking.DestinationRule).GetSubsets() {
			if s.GetName() != "" {
				out = append(out, s.GetName())
			}
		}
	}
	return out
}

// clusterTarget is a parsed, existing outbound cluster.
type clusterTarget struct {
	service *model.Service
	port    model.Port
	// labels select the subset's endpoints; nil for the whole service.
	labels map[string]string
}

// resolveCluster parses an outbound cluster name and checks that the
// service, port and subset exist and are visible to proxy.
func resolveCluster(proxy *model.Proxy, push *model.PushContext, name string) (clusterTarget, bool) {
	portNum, subset, host, err := parseClusterName(name)
	if err != nil {
		return clusterTarget{}, false
	}
	svc := push.ServiceByHost(host)
	if svc == nil || !svc.VisibleTo(proxy.ConfigNamespace()) {
		return clusterTarget{}, false
	}
	port, ok := svc.PortByNumber(portNum)
	if !ok {
		return clusterTarget{}, false
	}
	ct := clusterTarget{service: svc, port: port}
	if subset == "" {
		return ct, true
	}
	s := model.Subset(push.DestinationRule(proxy.ConfigNamespace(), svc), subset)
	if s == nil {
		return clusterTarget{}, false
	}
	ct.labels = s.GetLabels()
	return ct, true
}

// buildCluster returns an EDS cluster fetching endpoints of the same name over ADS.
func buildCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig:   adsConfigSource(),
			ServiceName: name,
		},
		LbPolicy: clusterv3.Cluster_ROUND_ROBIN,
	}
}
