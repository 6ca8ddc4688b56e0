package gateway

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
	"github.com/meshpilot/meshpilot/pilot/networking/wasm"
)

// BuildListeners returns the listeners of a router proxy, one per server
// port of the Gateways selecting it ("0.0.0.0_8080"), sorted by port:
//   - plain HTTP servers share one filter chain, an HTTP connection manager
//     with routes "http.PORT" from RDS;
//   - each TLS-terminating HTTPS server gets a chain matching its hosts as
//     SNI, with its DownstreamTlsContext and routes "https.PORT.NAME.GW.NS";
//   - PASSTHROUGH servers get one chain per SNI match of the tls routes of
//     the VirtualServices bound to them, a tcp_proxy to the route's cluster;
//   - TCP servers (TCP, MONGO, REDIS, MYSQL) get a chain without match, a
//     (weighted) tcp_proxy to the first applying tcp route of the bound
//     VirtualServices; TLS servers that terminate TLS get the same behind
//     an SNI match and their DownstreamTlsContext;
//   - AUTO_PASSTHROUGH servers (east-west gateways) get one chain per
//     SNI-DNAT cluster (see autoPassthrough).
//
// A server that cannot be built (unsupported protocol, bad TLS settings, a
// duplicate SNI) is logged and skipped; the rest is served. A proxy that is
// not a router, or that no Gateway selects, gets no listener.
func BuildListeners(proxy *model.Proxy, push *model.PushContext, log *slog.Logger) []*listenerv3.Listener {
	byPort, ports := servers(proxy, push)
	// RequestAuthentication applies to routers as to sidecars (Istio's
	// ingress JWT): the policies selecting the router's labels in its namespace.
	jwt, warnings, err := authn.JWTFilterFor(push.SecurityPolicies(), proxy.ConfigNamespace(), proxy.Labels())
	for _, w := range warnings {
		log.Warn("security policy field not applied", "warning", w)
	}
	if err != nil {
		log.Error("RequestAuthentication not applied", "error", err)
		jwt = nil
	}
	auth, err := authFilters(proxy, push, jwt)
	if err != nil {
		log.Error("gateway listeners not built", "error", err)
		return nil
	}
	defer auth.logWarnings(log)
	tel, err := telemetry.For(proxy, push)
	if err != nil {
		log.Error("gateway listeners not built", "error", err)
		return nil
	}
	for _, w := range tel.Warnings {
		log.Warn("telemetry setting not applied", "warning", w)
	}
	plugins := wasm.For(proxy, push)
	var out []*listenerv3.Listener
	for _, port := range ports {
		l := &listenerv3.Listener{
			Name:             listener.Name(listener.WildcardAddress, port),
			Address:          cluster.SocketAddress(listener.WildcardAddress, port),
			TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		}
		b := chainBuilder{log: log.With("listener", l.Name), statPrefix: "outbound_" + l.Name, proxy: proxy, labels: proxy.Labels(), auth: auth.http, seen: map[string]bool{}}
		for _, s := range byPort[port] {
			b.add(s, push)
		}
		if len(b.chains) == 0 && b.plain == nil {
			continue
		}
		l.FilterChains = b.chains
		if b.plain != nil {
			l.FilterChains = append(l.FilterChains, b.plain)
		}
		auth.addNetwork(l.FilterChains)
		if len(b.chains) > 0 {
			inspector, err := anypb.New(&tlsinspectorv3.TlsInspector{})
			if err != nil {
				log.Error("tls_inspector", "error", err)
				continue
			}
			l.ListenerFilters = []*listenerv3.ListenerFilter{{
				Name:       wellknown.TlsInspector,
				ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: inspector},
			}}
		}
		if err := tel.Apply(l, telemetry.Gateway); err != nil {
			log.Error("telemetry", "error", err)
			continue
		}
		if err := plugins.Apply(l, telemetry.Gateway); err != nil {
			log.Error("wasmplugin filters", "error", err)
			continue
		}
		out = append(out, l)
	}
	return out
}

// chainBuilder collects the filter chains of one listener.
type chainBuilder struct {
	log        *slog.Logger
	statPrefix string
	// proxy is the router (the services and DestinationRules it sees).
	proxy *model.Proxy
	// labels are the router's, for tcp routes' sourceLabels.
	labels map[string]string
	// auth are the HTTP filters of the router's RequestAuthentication and
	// AuthorizationPolicies (authFilters), first in each HTTP manager.
	auth []*hcmv3.HttpFilter
	// chains match SNI; plain is the chain without a match (plain HTTP or
	// opaque TCP, the first such server of the port), last.
	chains []*listenerv3.FilterChain
	plain  *listenerv3.FilterChain
	// plainKind is the kind of the server that made plain.
	plainKind kind
	// seen holds the SNI sets already matched, so no two chains collide.
	seen map[string]bool
}

func (b *chainBuilder) add(s server, push *model.PushContext) {
	log := b.log.With("gateway", s.gatewayKey(), "server", s.spec.GetPort().GetName())
	switch serverKind(s.spec) {
	case kindHTTP:
		if b.plain != nil {
			if b.plainKind != kindHTTP {
				log.Warn("gateway server not served: a TCP server already takes the port's unmatched connections")
			}
			return
		}
		hcm, err := connectionManager(b.statPrefix, s.routeName(), b.auth)
		if err != nil {
			log.Error("gateway server not served", "error", err)
			return
		}
		b.plain, b.plainKind = &listenerv3.FilterChain{Filters: []*listenerv3.Filter{hcm}}, kindHTTP
	case kindHTTPS:
		names := sniHosts(s)
		if !b.claim(names) {
			log.Warn("gateway server not served: its hosts are already matched on this port", "hosts", names)
			return
		}
		ts, err := downstreamTLS(s.spec, alpnHTTPS)
		if err != nil {
			log.Warn("gateway server not served", "error", err)
			return
		}
		hcm, err := connectionManager(b.statPrefix, s.routeName(), b.auth)
		if err != nil {
			log.Error("gateway server not served", "error", err)
			return
		}
		b.chains = append(b.chains, &listenerv3.FilterChain{
			FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: names},
			Filters:          []*listenerv3.Filter{hcm},
			TransportSocket:  ts,
		})
	case kindPassthrough:
		b.passthrough(s, push, log)
	case kindTCP, kindTLSTCP:
		b.tcp(s, push, log)
	case kindAutoPassthrough:
		b.autoPassthrough(s, push, log)
	default:
		log.Warn("gateway server not served: protocol and tls mode not supported",
			"protocol", s.spec.GetPort().GetProtocol(), "mode", s.spec.GetTls().GetMode().String())
	}
}

// claim records an SNI set; false when an equal set is already matched.
func (b *chainBuilder) claim(names []string) bool {
	key := strings.Join(names, ",")
	if b.seen[key] {
		return false
	}
	b.seen[key] = true
	return true
}

// passthrough adds one chain per SNI match of the tls routes bound to s.
func (b *chainBuilder) passthrough(s server, push *model.PushContext, log *slog.Logger) {
	port := s.spec.GetPort().GetNumber()
	for _, bvs := range s.virtualServices(push) {
		for i, tr := range bvs.vs.GetTls() {
			for _, m := range tr.GetMatch() {
				if m.GetPort() != 0 && m.GetPort() != port {
					continue
				}
				if len(m.GetGateways()) > 0 && !boundTo(m.GetGateways(), bvs.cfg.Namespace, s.gatewayKey()) {
					continue
				}
				names := sniWithin(m.GetSniHosts(), bvs.hosts)
				if len(names) == 0 || !b.claim(names) {
					continue
				}
				tcp, err := tcpProxy(tr.GetRoute(), bvs.cfg.Namespace, push)
				if err != nil {
					log.Warn("tls route not served", "virtualservice", bvs.cfg.Namespace+"/"+bvs.cfg.Name,
						"field", fmt.Sprintf("tls[%d]", i), "error", err)
					continue
				}
				b.chains = append(b.chains, &listenerv3.FilterChain{
					FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: serverNames(names)},
					Filters:          []*listenerv3.Filter{tcp},
				})
			}
		}
	}
}

// sniHosts are the server's hosts without their namespace part; none when
// one is "*" (every name matches).
func sniHosts(s server) []string {
	var out []string
	for _, h := range s.hosts() {
		if h.host == "*" {
			return nil
		}
		if !slices.Contains(out, h.host) {
			out = append(out, h.host)
		}
	}
	slices.Sort(out)
	return out
}

// serverNames is the filter chain match of SNI names: none (every name)
// when one is "*", which Envoy refuses as a server name (only a leading
// "*." wildcard is allowed).
func serverNames(names []string) []string {
	if slices.Contains(names, "*") {
		return nil
	}
	return names
}

// sniWithin returns the SNI hosts covered by the bound hosts, sorted.
func sniWithin(sni, hosts []string) []string {
	var out []string
	for _, n := range sni {
		for _, h := range hosts {
			if got, ok := intersect(n, h); ok && !slices.Contains(out, got) {
				out = append(out, got)
			}
		}
	}
	slices.Sort(out)
	return out
}

// tcpProxy forwards to the destinations of a tls route (weighted when
// there are several).
func tcpProxy(routes []*networking.RouteDestination, ns string, push *model.PushContext) (*listenerv3.Filter, error) {
	var weighted []*tcpv3.TcpProxy_WeightedCluster_ClusterWeight
	for i, r := range routes {
		d := r.GetDestination()
		if d.GetHost() == "" {
			return nil, fmt.Errorf("route[%d].destination.host: empty", i)
		}
		port := d.GetPort().GetNumber()
		if port == 0 {
			p, ok := onlyPort(d.GetHost(), ns, push)
			if !ok {
				return nil, fmt.Errorf("route[%d].destination.port: needed, %s has not exactly one port", i, d.GetHost())
			}
			port = p
		}
		if r.GetWeight() == 0 && len(routes) > 1 {
			continue
		}
		w := uint32(r.GetWeight())
		if w == 0 {
			w = 100
		}
		name := clustername.Build(clustername.Outbound, d.GetSubset(), model.ResolveShortname(d.GetHost(), ns, push.DomainSuffix), port)
		weighted = append(weighted, &tcpv3.TcpProxy_WeightedCluster_ClusterWeight{Name: name, Weight: w})
	}
	switch len(weighted) {
	case 0:
		return nil, fmt.Errorf("route: no destination")
	case 1:
		return listener.TCPProxyFilter(weighted[0].Name)
	}
	cfg, err := anypb.New(&tcpv3.TcpProxy{
		StatPrefix:       weighted[0].Name,
		ClusterSpecifier: &tcpv3.TcpProxy_WeightedClusters{WeightedClusters: &tcpv3.TcpProxy_WeightedCluster{Clusters: weighted}},
	})
	if err != nil {
		return nil, fmt.Errorf("tcp_proxy: %w", err)
	}
	return &listenerv3.Filter{Name: wellknown.TCPProxy, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}, nil
}

// connectionManager is the sidecar's RDS connection manager with the
// gateway settings Istio adds: the client address is the connection's peer
// (use_remote_address), as the gateway is the mesh's edge; auth go first
// among the HTTP filters.
func connectionManager(statPrefix, routeName string, auth []*hcmv3.HttpFilter) (*listenerv3.Filter, error) {
	f, err := listener.RDSConnectionManager(statPrefix, routeName)
	if err != nil {
		return nil, err
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
		return nil, fmt.Errorf("http_connection_manager %s: %w", statPrefix, err)
	}
	hcm.UseRemoteAddress = wrapperspb.Bool(true)
	hcm.HttpFilters = append(slices.Clip(auth), hcm.HttpFilters...)
	cfg, err := anypb.New(hcm)
	if err != nil {
		return nil, fmt.Errorf("http_connection_manager %s: %w", statPrefix, err)
	}
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: cfg}
	return f, nil
}
