package listener

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
)

// PassthroughFilterChain names the default filter chain of an outbound TLS
// listener whose chains all match on SNI or addresses, and of an outbound
// HTTP listener, as in Istio.
const PassthroughFilterChain = "PassthroughFilterChain"

// tlsChain is one filter chain of an outbound TLS listener: connections
// whose SNI is one of sni (none: any name) to one of prefixes (none: any
// address) go to dests.
type tlsChain struct {
	sni      []string
	prefixes []netip.Prefix
	dests    []tcpDestination
}

// matchKey identifies what the chain matches.
func (c tlsChain) matchKey() string {
	return strings.Join(c.sni, ",") + "|" + c.prefixKey()
}

// prefixKey identifies the chain's prefixes (sorted by tlsRoutesFor).
func (c tlsChain) prefixKey() string {
	var b strings.Builder
	for _, p := range c.prefixes {
		b.WriteString(p.String() + ",")
	}
	return b.String()
}

func (c tlsChain) matchesAll() bool { return len(c.sni) == 0 && len(c.prefixes) == 0 }

// tlsRoutes are the filter chains of an outbound TLS listener, from the tls
// routes of the VirtualServices of its services (several services share a
// 0.0.0.0 listener). Non-nil marks a TLS listener.
type tlsRoutes []tlsChain

// key is a string that differs whenever the routes do, for the cache.
func (r tlsRoutes) key() string {
	var b strings.Builder
	for _, c := range r {
		b.WriteString("|" + c.matchKey() + ">")
		b.WriteString(tcpRoutes{{dests: c.dests}}.key())
	}
	return b.String()
}

// unclaimed returns ch keeping only the SNI names no chain of r matches
// yet on the same prefixes, and false when none is left (or, for a chain
// matching any name, when r has one on those prefixes already): Envoy
// refuses a listener where two chains share a match, and the first
// applying route wins.
func (r tlsRoutes) unclaimed(ch tlsChain) (tlsChain, bool) {
	pk := ch.prefixKey()
	taken := func(name string) bool {
		return slices.ContainsFunc(r, func(have tlsChain) bool {
			if have.prefixKey() != pk {
				return false
			}
			if name == "" {
				return len(have.sni) == 0
			}
			return slices.Contains(have.sni, name)
		})
	}
	if len(ch.sni) == 0 {
		return ch, !taken("")
	}
	var left []string
	for _, n := range ch.sni {
		if !taken(n) {
			left = append(left, n)
		}
	}
	ch.sni = left
	return ch, len(left) > 0
}

// merge appends what the chains of other match that r does not yet.
func (r tlsRoutes) merge(other tlsRoutes) tlsRoutes {
	for _, c := range other {
		if c, ok := r.unclaimed(c); ok {
			r = append(r, c)
		}
	}
	return r
}

// tlsRoutesFor translates, Istio's way, the tls routes of the
// VirtualServices bound to svc for proxy on a TLS or HTTPS port, on a
// listener at addr: each match that applies (port, sourceLabels,
// sourceNamespace, gateways "mesh") gives a chain for its sniHosts (those
// within the VirtualService's hosts; "*" matches any name) and
// destinationSubnets, the first chain to claim an SNI name on given
// subnets winning (see unclaimed).
// With no applying match the port keeps one chain to the service's own
// cluster, matching the service's hostname as SNI when the listener is the
// shared 0.0.0.0 one (Istio's behaviour for services without a VIP, such as
// external HTTPS ServiceEntries). Bad routes are logged through warn and
// skipped.
func tlsRoutesFor(proxy *model.Proxy, push *model.PushContext, svc *model.Service, port uint32, addr string, warn func(string, error)) tlsRoutes {
	var out tlsRoutes
	for _, c := range push.VirtualServicesFor(proxy, svc.Hostname) {
		vs, _ := c.Spec.(*networking.VirtualService)
		name := c.Namespace + "/" + c.Name
		hosts := make([]string, 0, len(vs.GetHosts()))
		for _, h := range vs.GetHosts() {
			hosts = append(hosts, model.ResolveShortname(h, c.Namespace, push.DomainSuffix))
		}
		for i, tr := range vs.GetTls() {
			for j, m := range tr.GetMatch() {
				if !l4MatchApplies(proxy, port, m.GetPort(), m.GetSourceNamespace(), m.GetGateways(), m.GetSourceLabels()) {
					continue
				}
				field := fmt.Sprintf("tls[%d].match[%d]", i, j)
				sni, err := sniWithin(m.GetSniHosts(), hosts)
				if err != nil {
					warn(name, fmt.Errorf("%s.sniHosts: %w", field, err))
					continue
				}
				prefixes, err := parseSubnets(m.GetDestinationSubnets())
				if err != nil {
					warn(name, fmt.Errorf("%s.destinationSubnets: %w", field, err))
					continue
				}
				slices.SortFunc(prefixes, comparePrefixes)
				ch, ok := out.unclaimed(tlsChain{sni: sni, prefixes: slices.Compact(prefixes)})
				if !ok {
					continue
				}
				ch.dests, err = tcpDestinations(tr.GetRoute(), c.Namespace, push.DomainSuffix, port)
				if err != nil {
					warn(name, fmt.Errorf("tls[%d]: %w", i, err))
					continue
				}
				out = append(out, ch)
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	ch := tlsChain{dests: []tcpDestination{{cluster: clustername.Build(clustername.Outbound, "", svc.Hostname, port), weight: 100}}}
	if addr == WildcardAddress && svc.Hostname != "*" {
		ch.sni = []string{svc.Hostname}
	}
	return tlsRoutes{ch}
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// sniWithin returns the SNI names of a tls match that fall within the
// VirtualService's hosts, sorted; nil when one is "*" (any name). Names
// outside every host are an error, as Istio's validation has it.
func sniWithin(sni, hosts []string) ([]string, error) {
	if len(sni) == 0 {
		return nil, fmt.Errorf("empty")
	}
	out := make([]string, 0, len(sni))
	for _, n := range sni {
		if !slices.ContainsFunc(hosts, func(h string) bool { return model.HostMatches(h, n) }) {
			return nil, fmt.Errorf("%q is not within the hosts %v", n, hosts)
		}
		if n == "*" {
			return nil, nil
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// outboundTLS builds an outbound TLS listener: one filter chain per route
// chain, matching server_names and prefix_ranges, behind a tls_inspector
// when some chain matches on SNI. A chain matching everything becomes the
// default filter chain when there are others; without one, connections no
// chain claims go to PassthroughCluster (allowAny) or BlackHoleCluster, as
// virtualOutbound would send them.
func outboundTLS(name, addr string, port uint32, routes tlsRoutes, allowAny bool) (*listenerv3.Listener, error) {
	l := outboundListener(name, addr, port, nil)
	l.FilterChains = nil
	var matchAll *listenerv3.FilterChain
	sni := false
	for _, ch := range routes {
		f, err := weightedTCPProxyFilter(ch.dests, ch.dests[0].cluster)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", name, err)
		}
		fc := &listenerv3.FilterChain{Filters: []*listenerv3.Filter{f}}
		if ch.matchesAll() {
			if matchAll == nil {
				matchAll = fc
			}
			continue
		}
		fcm := &listenerv3.FilterChainMatch{ServerNames: ch.sni}
		for _, p := range ch.prefixes {
			fcm.PrefixRanges = append(fcm.PrefixRanges, &corev3.CidrRange{
				AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits())),
			})
		}
		sni = sni || len(ch.sni) > 0
		fc.FilterChainMatch = fcm
		l.FilterChains = append(l.FilterChains, fc)
	}
	switch {
	case len(l.FilterChains) == 0:
		l.FilterChains = []*listenerv3.FilterChain{matchAll}
	case matchAll != nil:
		l.DefaultFilterChain = matchAll
	default:
		target := clustername.BlackHole
		if allowAny {
			target = clustername.Passthrough
		}
		f, err := TCPProxyFilter(target)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", name, err)
		}
		l.DefaultFilterChain = &listenerv3.FilterChain{Name: PassthroughFilterChain, Filters: []*listenerv3.Filter{f}}
	}
	if sni {
		inspector, err := authn.TLSInspector()
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", name, err)
		}
		l.ListenerFilters = []*listenerv3.ListenerFilter{inspector}
		// TLS clients speak first; Istio waits for the ClientHello without
		// a timeout on outbound listeners.
		l.ListenerFiltersTimeout = durationpb.New(0)
		l.ContinueOnListenerFiltersTimeout = true
	}
	return l, nil
}
