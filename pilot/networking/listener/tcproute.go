package listener

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
)

// tcpDestination is one cluster of a TCP route and its weight.
type tcpDestination struct {
	cluster string
	weight  uint32
}

// tcpChain is one filter chain of a TCP listener: connections to one of
// prefixes (none: any address) go to dests.
type tcpChain struct {
	prefixes []netip.Prefix
	dests    []tcpDestination
}

// tcpRoutes is what the tcp section of the VirtualService bound to a
// service says for a client and a port: chains in order, the last one with
// no prefixes. nil: no VirtualService routes the port, the listener goes to
// the service's own cluster.
type tcpRoutes []tcpChain

// key is a string that differs whenever the routes do, for the cache.
func (r tcpRoutes) key() string {
	var b strings.Builder
	for _, c := range r {
		b.WriteString("|")
		for _, p := range c.prefixes {
			b.WriteString(p.String() + ",")
		}
		for _, d := range c.dests {
			b.WriteString(d.cluster + "=" + strconv.FormatUint(uint64(d.weight), 10) + ",")
		}
	}
	return b.String()
}

// tcpRoutesFor translates the tcp routes of the first VirtualService bound
// to svc for proxy on port, Istio's way: a route applies when one of its
// matches does (port, sourceLabels, sourceNamespace, gateways "mesh"); a
// match with destinationSubnets yields a chain for those subnets and the
// search goes on; the first applying route without subnets ends it.
// Routes whose destinations are all weight 0, or bad subnets, are logged
// through warn and skipped.
func tcpRoutesFor(proxy *model.Proxy, push *model.PushContext, svc *model.Service, port uint32, warn func(string, error)) tcpRoutes {
	vss := push.VirtualServicesFor(proxy, svc.Hostname)
	if len(vss) == 0 {
		return nil
	}
	c := vss[0]
	vs, _ := c.Spec.(*networking.VirtualService)
	var out tcpRoutes
	for i, tr := range vs.GetTcp() {
		dests, err := tcpDestinations(tr.GetRoute(), c.Namespace, push.DomainSuffix, port)
		if err != nil {
			warn(c.Namespace+"/"+c.Name, fmt.Errorf("tcp[%d]: %w", i, err))
			continue
		}
		if len(tr.GetMatch()) == 0 {
			return append(out, tcpChain{dests: dests})
		}
		for j, m := range tr.GetMatch() {
			if !tcpMatchApplies(m, proxy, port) {
				continue
			}
			if len(m.GetDestinationSubnets()) == 0 {
				return append(out, tcpChain{dests: dests})
			}
			prefixes, err := parseSubnets(m.GetDestinationSubnets())
			if err != nil {
				warn(c.Namespace+"/"+c.Name, fmt.Errorf("tcp[%d].match[%d].destinationSubnets: %w", i, j, err))
				continue
			}
			if !slices.ContainsFunc(out, func(ch tcpChain) bool { return slices.Equal(ch.prefixes, prefixes) }) {
				out = append(out, tcpChain{prefixes: prefixes, dests: dests})
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	// Unmatched connections keep going to the service itself.
	return append(out, tcpChain{dests: []tcpDestination{{cluster: clustername.Build(clustername.Outbound, "", svc.Hostname, port), weight: 100}}})
}

func tcpMatchApplies(m *networking.L4MatchAttributes, proxy *model.Proxy, port uint32) bool {
	return l4MatchApplies(proxy, port, m.GetPort(), m.GetSourceNamespace(), m.GetGateways(), m.GetSourceLabels())
}

// l4MatchApplies evaluates the static predicates of a tcp or tls match for
// a sidecar's listener on port: the match's port (0: any), its
// sourceNamespace, its gateways (empty or naming "mesh") and its
// sourceLabels (a subset of the proxy's).
func l4MatchApplies(proxy *model.Proxy, port, matchPort uint32, sourceNS string, gateways []string, sourceLabels map[string]string) bool {
	if matchPort != 0 && matchPort != port {
		return false
	}
	if sourceNS != "" && sourceNS != proxy.ConfigNamespace() {
		return false
	}
	if len(gateways) > 0 && !slices.Contains(gateways, "mesh") {
		return false
	}
	labels := proxy.Labels()
	for k, v := range sourceLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// tcpDestinations resolves route destinations to clusters (port: the
// destination's, else the listener's); weight 0 drops a destination of
// several, one destination alone weighs 100.
func tcpDestinations(route []*networking.RouteDestination, ns, domain string, port uint32) ([]tcpDestination, error) {
	if len(route) == 0 {
		return nil, fmt.Errorf("route: empty")
	}
	var out []tcpDestination
	for i, d := range route {
		dst := d.GetDestination()
		if dst.GetHost() == "" {
			return nil, fmt.Errorf("route[%d].destination.host: empty", i)
		}
		if d.GetWeight() < 0 {
			return nil, fmt.Errorf("route[%d].weight: %d is negative", i, d.GetWeight())
		}
		w := uint32(d.GetWeight())
		if w == 0 {
			if len(route) > 1 {
				continue
			}
			w = 100
		}
		p := port
		if n := dst.GetPort().GetNumber(); n != 0 {
			p = n
		}
		host := model.ResolveShortname(dst.GetHost(), ns, domain)
		out = append(out, tcpDestination{cluster: clustername.Build(clustername.Outbound, dst.GetSubset(), host, p), weight: w})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("route: every destination has weight 0")
	}
	return out, nil
}

// parseSubnets reads CIDRs or bare IPs (a /32 or /128).
func parseSubnets(in []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(in))
	for _, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%q: not an IP or CIDR", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// tcpFilterChains builds a listener's filter chains from routes; statPrefix
// names the tcp_proxy stats of weighted chains.
func tcpFilterChains(routes tcpRoutes, statPrefix string) ([]*listenerv3.FilterChain, error) {
	out := make([]*listenerv3.FilterChain, 0, len(routes))
	for _, ch := range routes {
		f, err := weightedTCPProxyFilter(ch.dests, statPrefix)
		if err != nil {
			return nil, err
		}
		fc := &listenerv3.FilterChain{Filters: []*listenerv3.Filter{f}}
		if len(ch.prefixes) > 0 {
			fcm := &listenerv3.FilterChainMatch{}
			for _, p := range ch.prefixes {
				fcm.PrefixRanges = append(fcm.PrefixRanges, &corev3.CidrRange{
					AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits())),
				})
			}
			fc.FilterChainMatch = fcm
		}
		out = append(out, fc)
	}
	return out, nil
}

// weightedTCPProxyFilter is TCPProxyFilter for one destination and a
// tcp_proxy with weighted_clusters for several.
func weightedTCPProxyFilter(dests []tcpDestination, statPrefix string) (*listenerv3.Filter, error) {
	if len(dests) == 1 {
		return TCPProxyFilter(dests[0].cluster)
	}
	wc := &tcpv3.TcpProxy_WeightedCluster{}
	for _, d := range dests {
		wc.Clusters = append(wc.Clusters, &tcpv3.TcpProxy_WeightedCluster_ClusterWeight{Name: d.cluster, Weight: d.weight})
	}
	cfg, err := anypb.New(&tcpv3.TcpProxy{
		StatPrefix:       statPrefix,
		ClusterSpecifier: &tcpv3.TcpProxy_WeightedClusters{WeightedClusters: wc},
	})
	if err != nil {
		return nil, fmt.Errorf("tcp_proxy %s: %w", statPrefix, err)
	}
	return &listenerv3.Filter{Name: wellknown.TCPProxy, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}, nil
}
