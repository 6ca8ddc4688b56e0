package adsc

import (
	"fmt"
	"sort"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshpilot/meshpilot/model"
)

// HealthyEndpoints returns the sorted "ip:port" addresses of the endpoints
// of EDS cluster that are not UNHEALTHY, or nil when the client holds no
// assignment for it (or cannot decode it).
func (c *Client) HealthyEndpoints(cluster string) []string {
	a := c.Resources(model.EndpointType)[cluster]
	if a == nil {
		return nil
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if a.UnmarshalTo(cla) != nil {
		return nil
	}
	out := []string{}
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			if lb.GetHealthStatus() == corev3.HealthStatus_UNHEALTHY {
				continue
			}
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	sort.Strings(out)
	return out
}

// IsEDSCluster reports whether the client holds cluster name and it is of
// type EDS.
func (c *Client) IsEDSCluster(name string) bool {
	a := c.Resources(model.ClusterType)[name]
	cl := &clusterv3.Cluster{}
	return a != nil && a.UnmarshalTo(cl) == nil && cl.GetType() == clusterv3.Cluster_EDS
}
