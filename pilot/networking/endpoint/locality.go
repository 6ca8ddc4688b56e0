package endpoint

import (
	"net"
	"strconv"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// localityLB is the locality load balancing of one cluster (see
// cluster.LocalityLB) and the push whose endpoints carry the labels
// failoverPriority compares.
type localityLB struct {
	lb   *cluster.LocalityLB
	push *model.PushContext
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
	return &localityLB{lb: lb, push: push}
}

// apply rewrites cla, an assignment built for this proxy alone, for the
// proxy's locality and, with failoverPriority, its labels.
func (l *localityLB) apply(cla *endpointv3.ClusterLoadAssignment, proxy *model.Proxy) {
	if l == nil {
		return
	}
	var endpointLabels [][]map[string]string
	if l.lb.UsesLabels() {
		endpointLabels = l.endpointLabels(cla)
	}
	l.lb.Apply(cla, proxy.Locality, proxy.Labels(), endpointLabels)
}

// endpointLabels returns the labels of each endpoint of cla, an assignment
// of an outbound cluster built from l.push, indexed like cla.Endpoints and
// their LbEndpoints: the registry labels of the endpoint of the cluster's
// service and port with that address and port.
func (l *localityLB) endpointLabels(cla *endpointv3.ClusterLoadAssignment) [][]map[string]string {
	_, _, host, portNum, ok := cluster.ParseName(cla.GetClusterName())
	if !ok {
		return nil
	}
	svc := l.push.ServiceByHost(host)
	if svc == nil {
		return nil
	}
	port, ok := svc.PortByNumber(portNum)
	if !ok {
		return nil
	}
	byAddr := map[string]map[string]string{}
	for _, e := range l.push.Endpoints.Endpoints(host) {
		if e.ServicePortName == port.Name {
			byAddr[net.JoinHostPort(e.Address, strconv.FormatUint(uint64(e.Port), 10))] = e.Labels
		}
	}
	out := make([][]map[string]string, len(cla.GetEndpoints()))
	for g, group := range cla.GetEndpoints() {
		out[g] = make([]map[string]string, len(group.GetLbEndpoints()))
		for i, lbe := range group.GetLbEndpoints() {
			sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
			out[g][i] = byAddr[net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))]
		}
	}
	return out
}

// scope is the cache scope of an assignment: "" without locality load
// balancing, else the proxy's locality and, with failoverPriority, the
// proxy's values of the labels it lists (see cluster.LocalityLB.Scope).
func (l *localityLB) scope(proxy *model.Proxy) string {
	if l == nil {
		return ""
	}
	return l.lb.Scope(proxy.Locality, proxy.Labels())
}
