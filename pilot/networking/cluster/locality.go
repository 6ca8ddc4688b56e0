package cluster

import (
	"math"
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// Topology label keys failoverPriority may name whose value, for a proxy
// or an endpoint without that label, is the matching part of its locality.
const (
	LabelTopologyRegion  = "topology.kubernetes.io/region"
	LabelTopologyZone    = "topology.kubernetes.io/zone"
	LabelTopologySubzone = "topology.istio.io/subzone"
)

// LocalityLB is the locality load balancing of one cluster: the
// localityLbSetting that applies and whether failover is on (Istio needs
// outlier detection for it).
type LocalityLB struct {
	Setting  *networking.LocalityLoadBalancerSetting
	Failover bool
}

// LocalityLBFor is the locality load balancing of the cluster of subset and
// port under the DestinationRule dr (nil for none), as Istio chooses it: the
// effective policy's localityLbSetting, else the mesh's (mesh may be nil),
// else Istio's default (enabled, no rules); a setting with enabled false
// turns it off. It is nil when it would change nothing (no distribute rules
// and no outlier detection), without allocating: that is the common case
// on every EDS cache lookup.
func LocalityLBFor(mesh *networking.LocalityLoadBalancerSetting, dr *model.Config, subset string, port uint32) *LocalityLB {
	policy := EffectivePolicyFor(dr, subset, port)
	s := policy.GetLoadBalancer().GetLocalityLbSetting()
	if s == nil {
		s = mesh
	}
	if s.GetEnabled() != nil && !s.GetEnabled().GetValue() {
		return nil
	}
	failover := policy.GetOutlierDetection() != nil
	if len(s.GetDistribute()) == 0 && !failover {
		return nil
	}
	if s == nil {
		s = &networking.LocalityLoadBalancerSetting{}
	}
	return &LocalityLB{Setting: s, Failover: failover}
}

// UsesLabels reports whether the result of Apply depends on endpoint and
// proxy labels (failoverPriority is in effect).
func (l *LocalityLB) UsesLabels() bool {
	return l != nil && len(l.Setting.GetDistribute()) == 0 && l.Failover && len(l.Setting.GetFailoverPriority()) > 0
}

// Scope is what Apply's result depends on of a proxy in locality loc with
// labels: "" when l is nil, else the locality and, with failoverPriority,
// the proxy's value of each listed label that carries no "=value"
// override. Two proxies with equal scopes get equal assignments.
func (l *LocalityLB) Scope(loc *corev3.Locality, labels map[string]string) string {
	if l == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("locality:")
	b.WriteString(loc.GetRegion() + "/" + loc.GetZone() + "/" + loc.GetSubZone())
	if l.UsesLabels() {
		for _, p := range l.Setting.GetFailoverPriority() {
			key, _, override := priorityLabel(p)
			if override {
				continue
			}
			b.WriteString("|" + key + "=" + LocalityLabel(labels, loc, key))
		}
	}
	return b.String()
}

// Apply rewrites cla (the endpoints one proxy receives, grouped by
// locality) for the proxy in locality loc with labels, as Istio does in
// EDS. With distribute rules, the first rule whose "from" matches the
// proxy's locality sets each group's load_balancing_weight from its "to"
// map (a weight shared by the groups one pattern matches, in proportion to
// their own weights) and empties the groups no pattern matches. Otherwise,
// when failover is on:
//   - with failoverPriority, each group is split by priority: an endpoint
//     whose values of the listed labels all equal the proxy's (or the
//     "label=value" override) gets 0, else N-i where i is the first label
//     that differs of the N listed; each split group's weight is the sum of
//     its endpoints'. Labels the endpoint or proxy lacks fall back to its
//     locality for the topology keys (see LocalityLabel). endpointLabels[g][i]
//     are the labels of cla.Endpoints[g].LbEndpoints[i] (nil: none).
//     Failover rules, when there are any, are then applied within each
//     failoverPriority level.
//   - else each group gets a priority by how much of the proxy's locality it
//     shares (region, zone, subzone: 0; region and zone: 1; region: 2; else
//     3, or 4 for regions a failover rule from the proxy's region does not
//     name).
//
// Priorities are then renumbered so they run from 0 without gaps. cla is
// changed in place: pass a copy of anything shared.
func (l *LocalityLB) Apply(cla *endpointv3.ClusterLoadAssignment, loc *corev3.Locality, labels map[string]string, endpointLabels [][]map[string]string) {
	s := l.GetSetting()
	if cla == nil || s == nil || (s.GetEnabled() != nil && !s.GetEnabled().GetValue()) {
		return
	}
	switch {
	case len(s.GetDistribute()) > 0:
		applyLocalityWeights(cla, loc, s.GetDistribute())
	case !l.Failover:
		// Without outlier detection a proxy never leaves priority 0: Istio
		// sets no priorities.
	case len(s.GetFailoverPriority()) > 0:
		applyFailoverPriority(cla, loc, labels, endpointLabels, s.GetFailoverPriority())
		if len(s.GetFailover()) > 0 {
			applyLocalityFailover(cla, loc, s.GetFailover())
		}
	default:
		applyLocalityFailover(cla, loc, s.GetFailover())
	}
}

// GetSetting returns the setting, nil for a nil l.
func (l *LocalityLB) GetSetting() *networking.LocalityLoadBalancerSetting {
	if l == nil {
		return nil
	}
	return l.Setting
}

// ApplyLocalityLB is (&LocalityLB{s, failover}).Apply for a proxy and
// endpoints without labels: failoverPriority then sees only the topology
// labels of the localities.
func ApplyLocalityLB(cla *endpointv3.ClusterLoadAssignment, proxy *corev3.Locality, s *networking.LocalityLoadBalancerSetting, failover bool) {
	(&LocalityLB{Setting: s, Failover: failover}).Apply(cla, proxy, nil, nil)
}

func applyLocalityWeights(cla *endpointv3.ClusterLoadAssignment, proxy *corev3.Locality, rules []*networking.LocalityLoadBalancerSetting_Distribute) {
	for _, rule := range rules {
		if !LocalityMatch(proxy, rule.GetFrom()) {
			continue
		}
		unmatched := make([]bool, len(cla.Endpoints))
		for i := range unmatched {
			unmatched[i] = true
		}
		targets := make([]string, 0, len(rule.GetTo()))
		for t := range rule.GetTo() {
			targets = append(targets, t)
		}
		sort.Strings(targets)
		for _, t := range targets {
			weight := rule.GetTo()[t]
			own := map[int]uint32{}
			var total uint32
			for i, group := range cla.Endpoints {
				if !unmatched[i] || !LocalityMatch(group.GetLocality(), t) {
					continue
				}
				unmatched[i] = false
				w := group.GetLoadBalancingWeight().GetValue()
				if w == 0 {
					w = 1
				}
				own[i] = w
				total += w
			}
			for i, w := range own {
				if share := float64(w) * float64(weight) / float64(total); share > 0 {
					cla.Endpoints[i].LoadBalancingWeight = wrapperspb.UInt32(uint32(math.Ceil(share)))
				}
			}
		}
		for i, u := range unmatched {
			if u {
				cla.Endpoints[i].LbEndpoints = nil
			}
		}
		return
	}
}

func applyLocalityFailover(cla *endpointv3.ClusterLoadAssignment, proxy *corev3.Locality, rules []*networking.LocalityLoadBalancerSetting_Failover) {
	used := map[uint32]bool{}
	for _, group := range cla.Endpoints {
		p := localityPriority(proxy, group.GetLocality())
		if p == 3 {
			for _, f := range rules {
				if f.GetFrom() == proxy.GetRegion() {
					if group.GetLocality().GetRegion() != f.GetTo() {
						p = 4
					}
					break
				}
			}
		}
		// Keep an earlier failoverPriority level: at most 5 locality
		// levels (0-4) fit within each.
		p += group.Priority * 5
		group.Priority = p
		used[p] = true
	}
	compactPriorities(cla, used)
}

// compactPriorities renumbers the priorities of cla's groups, used being
// the set of those in use, so they run from 0 without gaps in the same
// order (Envoy and grpc-go both require it).
func compactPriorities(cla *endpointv3.ClusterLoadAssignment, used map[uint32]bool) {
	levels := make([]uint32, 0, len(used))
	for p := range used {
		levels = append(levels, p)
	}
	sort.Slice(levels, func(i, j int) bool { return levels[i] < levels[j] })
	rank := make(map[uint32]uint32, len(levels))
	for i, p := range levels {
		rank[p] = uint32(i)
	}
	for _, group := range cla.Endpoints {
		group.Priority = rank[group.Priority]
	}
}

func localityPriority(proxy, ep *corev3.Locality) uint32 {
	switch {
	case proxy.GetRegion() != ep.GetRegion():
		return 3
	case proxy.GetZone() != ep.GetZone():
		return 2
	case proxy.GetSubZone() != ep.GetSubZone():
		return 1
	}
	return 0
}

// LocalityMatch reports whether l matches a locality pattern
// "region[/zone[/subzone]]", where "*" matches anything and a missing part
// matches any value.
func LocalityMatch(l *corev3.Locality, pattern string) bool {
	parts := strings.SplitN(pattern, "/", 3)
	want := [3]string{"*", "*", "*"}
	for i, p := range parts {
		if p != "" {
			want[i] = p
		}
	}
	got := [3]string{l.GetRegion(), l.GetZone(), l.GetSubZone()}
	for i := range want {
		if want[i] != "*" && want[i] != got[i] {
			return false
		}
	}
	return true
}

// applyFailoverPriority splits each group of cla by failoverPriority level
// (see LocalityLB.Apply), keeping the groups' order and, within a group,
// the levels in increasing order.
func applyFailoverPriority(cla *endpointv3.ClusterLoadAssignment, proxyLoc *corev3.Locality, proxyLabels map[string]string, endpointLabels [][]map[string]string, priorities []string) {
	n := uint32(len(priorities))
	keys := make([]string, len(priorities))
	want := make([]string, len(priorities))
	for i, p := range priorities {
		key, value, override := priorityLabel(p)
		if !override {
			value = LocalityLabel(proxyLabels, proxyLoc, key)
		}
		keys[i], want[i] = key, value
	}
	used := map[uint32]bool{}
	out := make([]*endpointv3.LocalityLbEndpoints, 0, len(cla.Endpoints))
	for g, group := range cla.Endpoints {
		byLevel := map[uint32][]*endpointv3.LbEndpoint{}
		for i, lbe := range group.GetLbEndpoints() {
			var labels map[string]string
			if g < len(endpointLabels) && i < len(endpointLabels[g]) {
				labels = endpointLabels[g][i]
			}
			level := uint32(0)
			for j, key := range keys {
				if LocalityLabel(labels, group.GetLocality(), key) != want[j] {
					level = n - uint32(j)
					break
				}
			}
			byLevel[level] = append(byLevel[level], lbe)
		}
		levels := make([]uint32, 0, len(byLevel))
		for p := range byLevel {
			levels = append(levels, p)
		}
		sort.Slice(levels, func(i, j int) bool { return levels[i] < levels[j] })
		for _, p := range levels {
			out = append(out, splitGroup(group, byLevel[p], p))
			used[p] = true
		}
	}
	cla.Endpoints = out
	compactPriorities(cla, used)
}

// splitGroup is a copy of group (locality, metadata...) holding only
// endpoints, at priority p, weighing the sum of their weights.
func splitGroup(group *endpointv3.LocalityLbEndpoints, endpoints []*endpointv3.LbEndpoint, p uint32) *endpointv3.LocalityLbEndpoints {
	all := group.LbEndpoints
	group.LbEndpoints = nil
	c := proto.Clone(group).(*endpointv3.LocalityLbEndpoints)
	group.LbEndpoints = all
	c.LbEndpoints = endpoints
	c.Priority = p
	var weight uint32
	for _, e := range endpoints {
		w := e.GetLoadBalancingWeight().GetValue()
		if w == 0 {
			w = 1
		}
		weight += w
	}
	c.LoadBalancingWeight = wrapperspb.UInt32(weight)
	return c
}

// priorityLabel parses a failoverPriority entry: "key", or "key=value" to
// compare endpoints with value instead of the proxy's own.
func priorityLabel(entry string) (key, value string, override bool) {
	parts := strings.Split(entry, "=")
	if len(parts) == 2 {
		return parts[0], parts[1], true
	}
	return parts[0], "", false
}

// LocalityLabel is the value of label key of a proxy or endpoint for
// failoverPriority: labels[key] when present, else for the topology keys
// (region, zone, subzone) the matching part of loc, else "".
func LocalityLabel(labels map[string]string, loc *corev3.Locality, key string) string {
	if v, ok := labels[key]; ok {
		return v
	}
	switch key {
	case LabelTopologyRegion:
		return loc.GetRegion()
	case LabelTopologyZone:
		return loc.GetZone()
	case LabelTopologySubzone:
		return loc.GetSubZone()
	}
	return ""
}
