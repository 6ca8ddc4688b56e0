package cluster

import (
	"math"
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// ApplyLocalityLB rewrites cla (the endpoints one proxy receives, grouped by
// locality) for a localityLbSetting, as Istio does in EDS: with distribute,
// the first rule whose "from" matches the proxy's locality sets each
// group's load_balancing_weight from its "to" map (a weight shared by the
// groups one pattern matches, in proportion to their own weights) and
// empties the groups no pattern matches; otherwise, when failover is
// enabled (Istio requires outlier detection for it), each group gets a
// priority by how much of the proxy's locality it shares (region, zone,
// subzone: 0; region and zone: 1; region: 2; else 3, or 4 for regions a
// failover rule from the proxy's region does not name), renumbered so
// priorities have no gaps. failoverPriority (label based) is not applied.
// cla is changed in place: pass a copy of anything shared.
func ApplyLocalityLB(cla *endpointv3.ClusterLoadAssignment, proxy *corev3.Locality, s *networking.LocalityLoadBalancerSetting, failover bool) {
	if cla == nil || s == nil || (s.GetEnabled() != nil && !s.GetEnabled().GetValue()) {
		return
	}
	if len(s.GetDistribute()) > 0 {
		applyLocalityWeights(cla, proxy, s.GetDistribute())
		return
	}
	if failover {
		applyLocalityFailover(cla, proxy, s.GetFailover())
	}
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
		group.Priority = p
		used[p] = true
	}
	levels := make([]uint32, 0, len(used))
	for p := range used {
		levels = append(levels, p)
	}
	sort.Slice(levels, func(i, j int) bool { return levels[i] < levels[j] })
	rank := map[uint32]uint32{}
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
