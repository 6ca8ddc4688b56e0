package grpcgen

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/trafficpolicy"
)

// ClusterGenerator builds EDS clusters "outbound|PORT|SUBSET|FQDN": one per
// port of each visible service and one more per DestinationRule subset,
// with the parts of the effective traffic policy grpc-go carries out (see
// buildCluster; PolicyWarnings names the rest).
type ClusterGenerator struct{}

// Generate returns the requested clusters that exist (unknown names are
// omitted), or every cluster of every visible service for a wildcard watch.
func (ClusterGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	out := map[string]proto.Message{}
	names, wildcard := requested(w)
	if wildcard {
		names = append(allClusterNames(proxy, push), names...)
	}
	for _, n := range names {
		if _, done := out[n]; done {
			continue
		}
		if ct, ok := resolveCluster(proxy, push, n); ok {
			out[n] = buildCluster(n, ct)
		}
	}
	return marshalAll(model.ClusterType, out)
}

// allClusterNames lists the clusters of every port and subset of every visible service.
func allClusterNames(proxy *model.Proxy, push *model.PushContext) []string {
	var out []string
	for _, svc := range push.ServicesFor(proxy) {
		for _, p := range svc.Ports {
			for _, subset := range subsetNames(proxy, push, svc) {
				out = append(out, clusterName(p.Port, subset, svc.Hostname))
			}
		}
	}
	return out
}

// subsetNames lists "" (the whole service) and the DestinationRule's subsets.
func subsetNames(proxy *model.Proxy, push *model.PushContext, svc *model.Service) []string {
	out := []string{""}
	if dr := push.DestinationRuleFor(proxy, svc); dr != nil {
		for _, s := range dr.Spec.(*networking.DestinationRule).GetSubsets() {
			if s.GetName() != "" {
				out = append(out, s.GetName())
			}
		}
	}
	return out
}

// clusterTarget is a parsed, existing outbound cluster.
type clusterTarget struct {
	service *model.Service
	port    model.Port
	// labels select the subset's endpoints; nil for the whole service.
	labels map[string]string
	// subset is the subset's name, "" for the whole service.
	subset string
	// rule is the DestinationRule the proxy sees for the service, or nil.
	rule *model.Config
}

// resolveCluster parses an outbound cluster name and checks that the
// service, port and subset exist and are visible to proxy.
func resolveCluster(proxy *model.Proxy, push *model.PushContext, name string) (clusterTarget, bool) {
	portNum, subset, host, err := parseClusterName(name)
	if err != nil {
		return clusterTarget{}, false
	}
	svc := push.VisibleService(proxy, host) // exportTo and the proxy's Sidecar
	if svc == nil {
		return clusterTarget{}, false
	}
	port, ok := svc.PortByNumber(portNum)
	if !ok {
		return clusterTarget{}, false
	}
	dr := push.DestinationRuleFor(proxy, svc)
	ct := clusterTarget{service: svc, port: port, rule: dr}
	if subset == "" {
		return ct, true
	}
	s := model.Subset(dr, subset)
	if s == nil {
		return clusterTarget{}, false
	}
	ct.labels, ct.subset = s.GetLabels(), subset
	return ct, true
}

// buildCluster returns an EDS cluster fetching endpoints of the same name
// over ADS, with what grpc-go supports of the effective traffic policy:
// LEAST_REQUEST, consistentHash as RING_HASH (else ROUND_ROBIN), the
// circuit breaker max_requests (http2MaxRequests) and outlier detection
// (localityLbSetting shapes the cluster's EDS, see loadAssignmentFor).
func buildCluster(name string, ct clusterTarget) *clusterv3.Cluster {
	policy := cluster.EffectivePolicyFor(ct.rule, ct.subset, ct.port.Port)
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig:   adsConfigSource(),
			ServiceName: name,
		},
		LbPolicy: clusterv3.Cluster_ROUND_ROBIN,
	}
	lb := policy.GetLoadBalancer()
	switch {
	case lb.GetConsistentHash() != nil:
		c.LbPolicy = clusterv3.Cluster_RING_HASH
		rh := &clusterv3.Cluster_RingHashLbConfig{HashFunction: clusterv3.Cluster_RingHashLbConfig_XX_HASH}
		if size := cluster.RingSize(lb.GetConsistentHash()); size > 0 {
			rh.MinimumRingSize = wrapperspb.UInt64(size)
		}
		c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: rh}
	case lb.GetSimple() == networking.LoadBalancerSettings_LEAST_REQUEST || lb.GetSimple() == networking.LoadBalancerSettings_LEAST_CONN:
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	}
	if v := policy.GetConnectionPool().GetHttp().GetHttp2MaxRequests(); v > 0 {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			MaxRequests: wrapperspb.UInt32(uint32(v)),
		}}}
	}
	c.OutlierDetection = cluster.OutlierDetection(policy.GetOutlierDetection())
	return c
}

// PolicyWarnings names every traffic policy field of the DestinationRule dr
// that proxyless gRPC clusters do not carry out, one message each.
func PolicyWarnings(dr *model.Config) []string {
	out := trafficpolicy.Warnings(dr, grpcUnsupported)
	for i := range out {
		out[i] += " (proxyless gRPC)"
	}
	return out
}

func grpcUnsupported(p *networking.TrafficPolicy) trafficpolicy.Notes {
	var out trafficpolicy.Notes
	out.AddIgnoredEverywhere(p)
	out.Add(p.GetTls() != nil && p.GetTls().GetMode() != networking.ClientTLSSettings_DISABLE, "tls", trafficpolicy.Ignored)
	lb := p.GetLoadBalancer()
	switch lb.GetSimple() {
	case networking.LoadBalancerSettings_RANDOM, networking.LoadBalancerSettings_PASSTHROUGH:
		out = append(out, "loadBalancer.simple: "+lb.GetSimple().String()+" not supported, ROUND_ROBIN used")
	}
	ch := lb.GetConsistentHash()
	out.Add(ch.GetMaglev() != nil, "loadBalancer.consistentHash.maglev", "not supported, RING_HASH used")
	out.Add(ch.GetHttpCookie() != nil, "loadBalancer.consistentHash.httpCookie", "gRPC hashes on headers only, ignored")
	out.Add(ch.GetUseSourceIp(), "loadBalancer.consistentHash.useSourceIp", "gRPC hashes on headers only, ignored")
	out.Add(ch.GetHttpQueryParameterName() != "", "loadBalancer.consistentHash.httpQueryParameterName", "gRPC hashes on headers only, ignored")
	out.Add(lb.GetZoneAwareLbSetting() != nil, "loadBalancer.zoneAwareLbSetting", trafficpolicy.Ignored)
	out.Add(lb.GetWarmupDurationSecs() != nil || lb.GetWarmup() != nil, "loadBalancer.warmup", trafficpolicy.Ignored)
	cp := p.GetConnectionPool()
	out.Add(cp.GetTcp() != nil, "connectionPool.tcp", trafficpolicy.Ignored)
	h := cp.GetHttp()
	out.Add(h.GetHttp1MaxPendingRequests() != 0, "connectionPool.http.http1MaxPendingRequests", trafficpolicy.Ignored)
	out.Add(h.GetMaxRequestsPerConnection() != 0, "connectionPool.http.maxRequestsPerConnection", trafficpolicy.Ignored)
	out.Add(h.GetMaxRetries() != 0, "connectionPool.http.maxRetries", trafficpolicy.Ignored)
	out.Add(h.GetIdleTimeout() != nil, "connectionPool.http.idleTimeout", trafficpolicy.Ignored)
	out.Add(h.GetH2UpgradePolicy() != networking.ConnectionPoolSettings_HTTPSettings_DEFAULT, "connectionPool.http.h2UpgradePolicy", trafficpolicy.Ignored)
	out.Add(h.GetUseClientProtocol(), "connectionPool.http.useClientProtocol", trafficpolicy.Ignored)
	out.Add(h.GetMaxConcurrentStreams() != 0, "connectionPool.http.maxConcurrentStreams", trafficpolicy.Ignored)
	out.Add(h.GetHttp2KeepAlive() != nil, "connectionPool.http.http2KeepAlive", trafficpolicy.Ignored)
	od := p.GetOutlierDetection()
	out.Add(od.GetMinHealthPercent() != 0, "outlierDetection.minHealthPercent", trafficpolicy.Ignored)
	out.Add(od.GetSplitExternalLocalOriginErrors(), "outlierDetection.splitExternalLocalOriginErrors", trafficpolicy.Ignored)
	out.Add(od.GetConsecutiveErrors() != 0, "outlierDetection.consecutiveErrors", "deprecated and ignored; use consecutive5xxErrors")
	out.Add(len(od.GetOutlierDetectionHttpErrorCodes()) > 0, "outlierDetection.outlierDetectionHttpErrorCodes", trafficpolicy.Ignored)
	return out
}
