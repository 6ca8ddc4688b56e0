package cluster

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
)

// SNIDNATClusters returns the clusters an AUTO_PASSTHROUGH gateway
// forwards to for svc, as istiod's SNI-DNAT clusters: those of
// ServiceClusters (one per port and subset, with the rule's traffic
// policy) renamed "outbound_.PORT_.SUBSET_.HOST" (clustername.SNIDNAT),
// without TLS origination: the bytes are already the client sidecar's mTLS
// (no transport socket, no auto-mTLS match). Passthrough services get EDS
// clusters, as a gateway has no original destination to forward to. None
// for a mesh-external service.
func SNIDNATClusters(push *model.PushContext, svc *model.Service, dr *model.Config, timeout *durationpb.Duration) ([]*clusterv3.Cluster, error) {
	if svc.MeshExternal {
		return nil, nil
	}
	cs, err := ServiceClusters(push, svc, dr, timeout)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		_, subset, host, port, ok := clustername.Parse(c.Name)
		if !ok {
			return nil, fmt.Errorf("service %s: cluster %s: not an outbound cluster name", svc.Hostname, c.Name)
		}
		name := clustername.SNIDNAT(subset, host, port)
		c.Name = name
		c.TransportSocket = nil
		c.TransportSocketMatches = nil
		if svc.Resolution == model.Passthrough {
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
			c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
		}
		if c.GetType() == clusterv3.Cluster_EDS {
			c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ADSConfigSource(), ServiceName: name}
		}
		if c.LoadAssignment != nil {
			c.LoadAssignment.ClusterName = name
		}
	}
	return cs, nil
}
