// Package endpoint builds the ClusterLoadAssignments (EDS) of a sidecar.
package endpoint

import (
	"sort"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
)

// Build returns one assignment per cluster name, in the order of names.
func Build(proxy *model.Proxy, push *model.PushContext, names []string) []*endpointv3.ClusterLoadAssignment {
	out := make([]*endpointv3.ClusterLoadAssignment, 0, len(names))
	for _, n := range names {
		out = append(out, BuildLoadAssignment(proxy, push, n))
	}
	return out
}

// BuildLoadAssignment returns the endpoints of an outbound cluster: those of
// the cluster's service and port, filtered by the subset's labels (from the
// DestinationRule the proxy sees), grouped by locality. A name that is not an
// outbound cluster of a known service, port and subset gets an assignment
// with no endpoints, so Envoy does not wait for it forever. Endpoints of
// workloads with a sidecar carry the envoy.transport_socket_match metadata
// auto-mTLS matches ({tlsMode: istio}), and endpoints of a cluster carry
// istiod's istio.workload metadata (see lbEndpointMetadata); a DestinationRule's locality load
// balancing is applied for the proxy's locality.
func BuildLoadAssignment(proxy *model.Proxy, push *model.PushContext, name string) *endpointv3.ClusterLoadAssignment {
	t := resolve(proxy, push, name)
	cla, labels := t.build(proxy, push, name)
	t.locality.apply(cla, proxy, labels)
	return cla
}

// target is what an EDS cluster name resolves to for a proxy.
type target struct {
	svc  *model.Service
	port model.Port
	// dr is the DestinationRule the proxy sees for svc (nil for none);
	// subset is the cluster's subset.
	dr     *model.Config
	subset string
	// labels are the subset's labels (nil: every endpoint).
	labels map[string]string
	// locality is the locality load balancing the assignment gets for
	// the proxy (see localitySetting); nil for none.
	locality *localityLB
	// ok is false when the name is no outbound cluster of a known service
	// port and subset: the assignment is empty.
	ok bool
	// mTLSOnly is set for an AUTO_PASSTHROUGH gateway's SNI-DNAT cluster
	// ("outbound_.PORT_.SUBSET_.HOST"): as istiod, only endpoints with a
	// sidecar (tlsMode istio) are sent, since the gateway cannot tell
	// whether the bytes it passes through are mTLS.
	mTLSOnly bool
}

func resolve(proxy *model.Proxy, push *model.PushContext, name string) target {
	dir, subset, host, portNum, ok := clustername.Parse(name)
	if !ok || dir != clustername.Outbound {
		return target{}
	}
	t := target{svc: push.ServiceByHost(host), subset: subset, mTLSOnly: clustername.IsSNIDNAT(name)}
	if t.svc == nil {
		return t
	}
	if t.port, ok = t.svc.PortByNumber(portNum); !ok {
		return t
	}
	t.dr = push.DestinationRuleFor(proxy, t.svc)
	if subset != "" && model.Subset(t.dr, subset) == nil {
		return t
	}
	if subset != "" {
		t.labels = model.Subset(t.dr, subset).GetLabels()
	}
	t.ok = true
	t.locality = localitySetting(push, t.dr, subset, portNum)
	return t
}

// build returns the assignment and, when the proxy's locality load
// balancing compares labels (failoverPriority), the registry labels of each
// endpoint (with its network: see model.NetworkLabels), indexed like its
// Endpoints and their LbEndpoints. In a multi-network mesh the endpoints
// are those the proxy's network reaches (see SplitHorizon). SNI-DNAT
// clusters keep only mTLS endpoints (see target.mTLSOnly).
func (t target) build(proxy *model.Proxy, push *model.PushContext, name string) (*endpointv3.ClusterLoadAssignment, [][]map[string]string) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	if !t.ok {
		return cla, nil
	}
	host := t.svc.Hostname
	withLabels := t.locality.usesLabels()
	byLocality := map[string]*endpointv3.LocalityLbEndpoints{}
	memo := metadataMemo{}
	var labelsByLocality map[string][]map[string]string
	if withLabels {
		labelsByLocality = map[string][]map[string]string{}
	}
	eps := push.Endpoints.Endpoints(host)
	// selected: eps holds the cluster's endpoints only (gateway stand-ins
	// carry no subset labels, so they are selected before the split).
	selected := false
	if gws := push.NetworkGateways(); gws.Enabled() {
		var own []*model.Endpoint
		for _, e := range eps {
			if t.selects(e) {
				own = append(own, e)
			}
		}
		eps, selected = SplitHorizon(proxy.Metadata.Network, gws, own), true
	}
	for _, e := range eps {
		if !selected && !t.selects(e) {
			continue
		}
		if t.mTLSOnly && e.Labels[cluster.TLSModeLabel] != cluster.TLSModeIstio {
			continue
		}
		group := byLocality[e.Locality]
		if group == nil {
			group = &endpointv3.LocalityLbEndpoints{Locality: model.ParseLocality(e.Locality), LoadBalancingWeight: wrapperspb.UInt32(0)}
			byLocality[e.Locality] = group
		}
		lbe := cluster.LbEndpoint(e.Address, e.Port, e.Weight, e.Healthy)
		lbe.Metadata = memo.of(e)
		group.LbEndpoints = append(group.LbEndpoints, lbe)
		group.LoadBalancingWeight.Value += lbe.GetLoadBalancingWeight().GetValue()
		if withLabels {
			labelsByLocality[e.Locality] = append(labelsByLocality[e.Locality], model.NetworkLabels(e))
		}
	}
	keys := make([]string, 0, len(byLocality))
	for k := range byLocality {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var endpointLabels [][]map[string]string
	for _, k := range keys {
		cla.Endpoints = append(cla.Endpoints, byLocality[k])
		if withLabels {
			endpointLabels = append(endpointLabels, labelsByLocality[k])
		}
	}
	return cla, endpointLabels
}

// selects reports whether endpoint e of the target's service belongs to
// the cluster: it serves the port and carries the subset's labels.
func (t target) selects(e *model.Endpoint) bool {
	return e.ServicePortName == t.port.Name && e.SubsetMatches(t.labels)
}

// Members is what an EDS cluster name resolves to for a proxy: the
// service, port, DestinationRule and subset, and the endpoints the
// assignment is built from.
type Members struct {
	Service *model.Service
	Port    model.Port
	// DestinationRule is the rule the proxy sees for Service (nil: none);
	// Subset the cluster's subset and its labels.
	DestinationRule *model.Config
	Subset          string
	SubsetLabels    map[string]string
	Endpoints       []*model.Endpoint
}

// MembersOf resolves name as BuildLoadAssignment does; false when the
// name is no outbound cluster of a known service port and subset (its
// assignment is empty).
func MembersOf(proxy *model.Proxy, push *model.PushContext, name string) (Members, bool) {
	t := resolve(proxy, push, name)
	if !t.ok {
		return Members{}, false
	}
	m := Members{Service: t.svc, Port: t.port, DestinationRule: t.dr, Subset: t.subset, SubsetLabels: t.labels}
	for _, e := range push.Endpoints.Endpoints(t.svc.Hostname) {
		if t.selects(e) {
			m.Endpoints = append(m.Endpoints, e)
		}
	}
	return m, true
}
