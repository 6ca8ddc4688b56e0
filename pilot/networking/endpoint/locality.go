package endpoint

import (
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// localityLB is the locality load balancing of one cluster (see
// cluster.LocalityLB).
type localityLB struct {
	lb *cluster.LocalityLB
}

// localitySetting is the locality load balancing of the cluster of subset
// and port under dr (see cluster.LocalityLBFor). It is nil when it would
// change nothing, without allocating: the common case on every EDS cache
// lookup.
func localitySetting(push *model.PushContext, dr *model.Config, subset string, port uint32) *localityLB {
	lb := cluster.LocalityLBFor(push.Mesh.GetLocalityLbSetting(), dr, subset, port)
	if lb == nil {
		return nil
	}
	return &localityLB{lb: lb}
}

// apply rewrites cla, an assignment built for this proxy alone, for the
// proxy's locality and, with failoverPriority, its labels; endpointLabels
// are the labels of cla's endpoints as target.build returns them.
func (l *localityLB) apply(cla *endpointv3.ClusterLoadAssignment, proxy *model.Proxy, endpointLabels [][]map[string]string) {
	if l == nil {
		return
	}
	l.lb.Apply(cla, proxy.Locality, proxy.Labels(), endpointLabels)
}

// usesLabels reports whether apply needs the endpoints' labels.
func (l *localityLB) usesLabels() bool { return l != nil && l.lb.UsesLabels() }

// scope is the cache scope of an assignment: "" without locality load
// balancing, else the proxy's locality and, with failoverPriority, the
// proxy's values of the labels it lists (see cluster.LocalityLB.Scope).
func (l *localityLB) scope(proxy *model.Proxy) string {
	if l == nil {
		return ""
	}
	return l.lb.Scope(proxy.Locality, proxy.Labels())
}
