// Package cluster builds the Envoy clusters (CDS) of a sidecar.
package cluster

import (
	"fmt"
	"sort"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
	"github.com/meshpilot/meshpilot/pilot/networking/trafficpolicy"
)

// HTTPProtocolOptionsKey is the typed_extension_protocol_options key of upstream HTTP settings.
const HTTPProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// inboundPassthroughSource is the source address Istio binds inbound
// passthrough connections to, so iptables lets them reach the app.
const inboundPassthroughSource = "127.0.0.6"

// Build returns the clusters of proxy, sorted by name: outbound clusters for
// every visible service port and DestinationRule subset (and, for a router
// with an AUTO_PASSTHROUGH server, their SNI-DNAT twins: SNIDNATClusters),
// inbound clusters for the proxy's own service ports, and the three
// built-in clusters.
func Build(proxy *model.Proxy, push *model.PushContext) ([]*clusterv3.Cluster, error) {
	timeout := ConnectTimeout(push.Mesh)
	byName := map[string]*clusterv3.Cluster{}
	add := func(c *clusterv3.Cluster) {
		if _, dup := byName[c.Name]; !dup {
			byName[c.Name] = c
		}
	}
	sniDNAT := wantsSNIDNAT(proxy, push)
	for _, svc := range push.ServicesFor(proxy) {
		dr := push.DestinationRuleFor(proxy, svc)
		cs, err := ServiceClusters(push, svc, dr, timeout)
		if err != nil {
			return nil, err
		}
		if sniDNAT {
			sni, err := SNIDNATClusters(push, svc, dr, timeout)
			if err != nil {
				return nil, err
			}
			cs = append(cs, sni...)
		}
		for _, c := range cs {
			add(c)
		}
	}
	inbound, err := InboundClusters(proxy, push, timeout)
	if err != nil {
		return nil, err
	}
	for _, c := range inbound {
		add(c)
	}
	for _, c := range BuiltinClusters(timeout) {
		add(c)
	}
	out := make([]*clusterv3.Cluster, 0, len(byName))
	for _, c := range byName {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ServiceClusters returns the outbound clusters of svc as seen through the
// DestinationRule dr (nil for none): one per non-UDP port, then one per
// subset of each port, without duplicate names, each with its effective
// traffic policy (EffectivePolicy) applied. The result depends only on svc,
// dr, timeout, the mesh config and, for DNS services or rules using
// ISTIO_MUTUAL or auto-mTLS (the service accounts), the service's endpoints
// and, for auto-mTLS, the PeerAuthentications, so it can be shared by every
// proxy that sees the same rule.
func ServiceClusters(push *model.PushContext, svc *model.Service, dr *model.Config, timeout *durationpb.Duration) ([]*clusterv3.Cluster, error) {
	var rule *networking.DestinationRule
	if dr != nil {
		rule = dr.Spec.(*networking.DestinationRule)
	}
	out := make([]*clusterv3.Cluster, 0, len(svc.Ports)*(1+len(rule.GetSubsets())))
	var seen map[string]bool
	add := func(c *clusterv3.Cluster) {
		if len(rule.GetSubsets()) > 0 {
			if seen == nil {
				seen = map[string]bool{}
			}
			if seen[c.Name] {
				return
			}
			seen[c.Name] = true
		}
		out = append(out, c)
	}
	var sas []string
	if usesIstioMutual(rule) || mayAutoMTLS(push, svc) {
		sas = ServiceAccounts(push, svc)
	}
	for _, port := range svc.Ports {
		if port.Protocol == model.ProtocolUDP {
			continue
		}
		auto, err := newAutoMTLSPort(push, svc, port, sas)
		if err != nil {
			return nil, err
		}
		for _, subset := range append([]string{""}, subsetNames(rule)...) {
			var labels map[string]string
			if subset != "" {
				labels = model.Subset(dr, subset).GetLabels()
			}
			c, err := outbound(push, svc, port, subset, labels, EffectivePolicy(rule, subset, port.Port), sas, auto, timeout)
			if err != nil {
				return nil, err
			}
			add(c)
		}
	}
	return out, nil
}

func subsetNames(rule *networking.DestinationRule) []string {
	out := make([]string, 0, len(rule.GetSubsets()))
	for _, s := range rule.GetSubsets() {
		out = append(out, s.GetName())
	}
	return out
}

// usesIstioMutual reports whether any policy of rule asks for ISTIO_MUTUAL
// (its clusters then name the destination's service accounts).
func usesIstioMutual(rule *networking.DestinationRule) bool {
	for _, pa := range trafficpolicy.All(rule) {
		if pa.Policy.GetTls().GetMode() == networking.ClientTLSSettings_ISTIO_MUTUAL {
			return true
		}
	}
	return false
}

// InboundClusters returns the inbound clusters of the proxy, one per
// target port, sorted by name: those of its own service ports or, when its
// Sidecar has ingress listeners, those of the listeners (Istio's
// "ingress listener" path: the services the workload backs are then not
// used for the inbound side). The connection pool of an ingress listener,
// else the Sidecar's inboundConnectionPool, sets the circuit breakers,
// connect timeout and TCP keepalive (HTTP options are not applied).
func InboundClusters(proxy *model.Proxy, push *model.PushContext, timeout *durationpb.Duration) ([]*clusterv3.Cluster, error) {
	var out []*clusterv3.Cluster
	scope := push.SidecarScope(proxy)
	if scope.HasIngress() {
		for _, in := range scope.IngressListeners() {
			c, err := ingressCluster(proxy, in, timeout)
			if err != nil {
				return nil, err
			}
			if in.ConnectionPool != nil {
				applyConnectionPool(c, in.ConnectionPool)
			}
			out = append(out, c)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return out, nil
	}
	seen := map[string]bool{}
	for _, t := range push.ServiceTargetsFor(proxy) {
		c, err := inbound(t, timeout)
		if err != nil {
			return nil, err
		}
		if !seen[c.Name] {
			seen[c.Name] = true
			if cp := scope.InboundConnectionPool(); cp != nil {
				applyConnectionPool(c, cp)
			}
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// BuiltinClusters returns BlackHoleCluster, PassthroughCluster and
// InboundPassthroughCluster.
func BuiltinClusters(timeout *durationpb.Duration) []*clusterv3.Cluster {
	return []*clusterv3.Cluster{blackHole(timeout), passthrough(timeout), inboundPassthrough(timeout)}
}

// outbound builds "outbound|PORT|SUBSET|HOST" with the effective traffic
// policy applied; sas are the destination's SPIFFE IDs (for ISTIO_MUTUAL)
// and auto the port's auto-mTLS.
func outbound(push *model.PushContext, svc *model.Service, port model.Port, subset string, labels map[string]string,
	policy *networking.TrafficPolicy, sas []string, auto *autoMTLSPort, timeout *durationpb.Duration,
) (*clusterv3.Cluster, error) {
	name := clustername.Build(clustername.Outbound, subset, svc.Hostname, port.Port)
	c := &clusterv3.Cluster{Name: name, ConnectTimeout: timeout}
	switch svc.Resolution {
	case model.ClientSideLB:
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
		c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ADSConfigSource(), ServiceName: name}
	case model.DNSLB, model.DNSRoundRobinLB:
		typ := clusterv3.Cluster_STRICT_DNS
		if svc.Resolution == model.DNSRoundRobinLB {
			typ = clusterv3.Cluster_LOGICAL_DNS
		}
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: typ}
		c.DnsLookupFamily = clusterv3.Cluster_V4_ONLY
		c.RespectDnsTtl = true
		c.LoadAssignment = dnsAssignment(push, svc, port, name, labels, typ == clusterv3.Cluster_LOGICAL_DNS)
	case model.Passthrough:
		setOriginalDst(c)
	default:
		return nil, fmt.Errorf("service %s: resolution %v: not supported", svc.Hostname, svc.Resolution)
	}
	applyConnectionPool(c, policy.GetConnectionPool())
	applyRetryBudget(c, policy.GetRetryBudget())
	applyOutlierDetection(c, policy.GetOutlierDetection())
	if svc.Resolution != model.Passthrough {
		applyLB(c, policy.GetLoadBalancer())
	}
	verify := !push.SkipVerifyCertAtClient
	if err := applyHTTPOptions(c, port, policy, push.Mesh, verify); err != nil {
		return nil, fmt.Errorf("service %s port %d: %w", svc.Hostname, port.Port, err)
	}
	t := tlsTarget{port: port, subset: subset, host: svc.Hostname, serviceAccounts: sas, verifyAtClient: verify}
	if err := applyTLS(c, policy.GetTls(), t); err != nil {
		return nil, fmt.Errorf("service %s port %d: %w", svc.Hostname, port.Port, err)
	}
	if auto.applies(policy) {
		auto.apply(c, t)
	}
	if err := applyProxyProtocol(c, policy.GetProxyProtocol()); err != nil {
		return nil, fmt.Errorf("service %s port %d: %w", svc.Hostname, port.Port, err)
	}
	if err := addMetadataExchange(c); err != nil {
		return nil, fmt.Errorf("service %s port %d: %w", svc.Hostname, port.Port, err)
	}
	return c, nil
}

// addMetadataExchange puts Istio's upstream metadata exchange filter on c,
// as istiod does on outbound clusters and PassthroughCluster.
func addMetadataExchange(c *clusterv3.Cluster) error {
	mx, err := telemetry.ClusterMetadataExchange()
	if err != nil {
		return err
	}
	c.Filters = append(c.Filters, mx)
	return nil
}

func setOriginalDst(c *clusterv3.Cluster) {
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST}
	c.LbPolicy = clusterv3.Cluster_CLUSTER_PROVIDED
}

// dnsAssignment lists the endpoints a DNS cluster resolves: the service's
// endpoints on this port (their Address is a hostname or IP), or the service
// hostname itself when it has none. LOGICAL_DNS takes exactly one.
func dnsAssignment(push *model.PushContext, svc *model.Service, port model.Port, name string, labels map[string]string, single bool) *endpointv3.ClusterLoadAssignment {
	var lbEps []*endpointv3.LbEndpoint
	for _, e := range push.Endpoints.Endpoints(svc.Hostname) {
		if e.ServicePortName != port.Name || !e.SubsetMatches(labels) {
			continue
		}
		lbe := LbEndpoint(e.Address, e.Port, e.Weight, true)
		lbe.Metadata = EndpointMetadata(e.Labels)
		lbEps = append(lbEps, lbe)
		if single {
			break
		}
	}
	if len(lbEps) == 0 && (single || len(labels) == 0) {
		lbEps = append(lbEps, LbEndpoint(svc.Hostname, port.Port, 1, true))
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	if len(lbEps) > 0 {
		cla.Endpoints = []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbEps}}
	}
	return cla
}

// LbEndpoint returns an endpoint at address:port with the given weight (0
// means 1) and health.
func LbEndpoint(address string, port, weight uint32, healthy bool) *endpointv3.LbEndpoint {
	if weight == 0 {
		weight = 1
	}
	health := corev3.HealthStatus_HEALTHY
	if !healthy {
		health = corev3.HealthStatus_UNHEALTHY
	}
	return &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: SocketAddress(address, port),
		}},
		HealthStatus:        health,
		LoadBalancingWeight: wrapUInt32(weight),
	}
}

// SocketAddress returns a TCP socket address.
func SocketAddress(address string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       address,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// ADSConfigSource is the config source "fetch over the ADS stream, v3".
func ADSConfigSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

func setHTTP2(c *clusterv3.Cluster) error {
	opts, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
				},
			},
		},
	})
	if err != nil {
		return fmt.Errorf("cluster %s: typed_extension_protocol_options: %w", c.Name, err)
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{HTTPProtocolOptionsKey: opts}
	return nil
}

// inbound builds "inbound|TARGETPORT||" as Istio does: an ORIGINAL_DST
// cluster, so a connection goes on to the address it was sent to (the
// workload's own IP and target port, not localhost: an application bound
// to localhost only is not exposed), from 127.0.0.6, the source the
// sidecar's iptables rules let through without redirecting it again.
// HTTP/2 upstream for HTTP/2 protocols.
func inbound(t model.ServiceTarget, timeout *durationpb.Duration) (*clusterv3.Cluster, error) {
	c := &clusterv3.Cluster{
		Name:           clustername.Build(clustername.Inbound, "", "", t.TargetPort),
		ConnectTimeout: timeout,
		UpstreamBindConfig: &corev3.BindConfig{SourceAddress: &corev3.SocketAddress{
			Address:       inboundPassthroughSource,
			PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 0},
		}},
	}
	setOriginalDst(c)
	if t.Port.Protocol.IsHTTP2() {
		if err := setHTTP2(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ingressCluster builds "inbound|PORT||" of a Sidecar ingress listener: a
// STATIC cluster to its defaultEndpoint, a Unix socket (an Envoy pipe
// address) or IP:PORT, where 0.0.0.0 stands for the proxy's first IP
// (Istio: the instance IP; 127.0.0.1 when the proxy reports none).
func ingressCluster(proxy *model.Proxy, in model.IngressListener, timeout *durationpb.Duration) (*clusterv3.Cluster, error) {
	ep := in.Endpoint
	var addr *corev3.Address
	switch {
	case ep.Pipe != "":
		addr = &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: ep.Pipe}}}
	case ep.Address == model.InstanceIP:
		ip := "127.0.0.1"
		if len(proxy.IPAddresses) > 0 {
			ip = proxy.IPAddresses[0]
		}
		addr = SocketAddress(ip, ep.Port)
	default:
		addr = SocketAddress(ep.Address, ep.Port)
	}
	return staticInbound(in.Port, addr, in.Protocol, timeout)
}

// staticInbound builds "inbound|PORT||", a STATIC cluster to addr, HTTP/2
// upstream for HTTP/2 protocols.
func staticInbound(port uint32, addr *corev3.Address, protocol model.Protocol, timeout *durationpb.Duration) (*clusterv3.Cluster, error) {
	name := clustername.Build(clustername.Inbound, "", "", port)
	c := &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       timeout,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier:      &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}},
					HealthStatus:        corev3.HealthStatus_HEALTHY,
					LoadBalancingWeight: wrapUInt32(1),
				}},
			}},
		},
	}
	if protocol.IsHTTP2() {
		if err := setHTTP2(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func blackHole(timeout *durationpb.Duration) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 clustername.BlackHole,
		ConnectTimeout:       timeout,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
	}
}

func passthrough(timeout *durationpb.Duration) *clusterv3.Cluster {
	c := &clusterv3.Cluster{Name: clustername.Passthrough, ConnectTimeout: timeout}
	setOriginalDst(c)
	// A constant config: packing it cannot fail.
	_ = addMetadataExchange(c)
	return c
}

func inboundPassthrough(timeout *durationpb.Duration) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:           clustername.InboundPassthrough,
		ConnectTimeout: timeout,
		UpstreamBindConfig: &corev3.BindConfig{SourceAddress: &corev3.SocketAddress{
			Address:       inboundPassthroughSource,
			PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 0},
		}},
	}
	setOriginalDst(c)
	return c
}
