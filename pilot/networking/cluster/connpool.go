package cluster

import (
	"fmt"
	"math"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	commonmatcherv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/matcher/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// DefaultThresholds are the circuit breaker thresholds Istio puts on every
// outbound cluster: no limits (Envoy's own defaults are 1024), remaining
// capacity tracked.
func DefaultThresholds() *clusterv3.CircuitBreakers_Thresholds {
	return &clusterv3.CircuitBreakers_Thresholds{
		MaxConnections:     wrapperspb.UInt32(math.MaxUint32),
		MaxPendingRequests: wrapperspb.UInt32(math.MaxUint32),
		MaxRequests:        wrapperspb.UInt32(math.MaxUint32),
		MaxRetries:         wrapperspb.UInt32(math.MaxUint32),
		TrackRemaining:     true,
	}
}

// applyConnectionPool sets the circuit breakers (always, Istio's defaults
// overridden by connectionPool), the connect timeout and TCP keepalive.
func applyConnectionPool(c *clusterv3.Cluster, cp *networking.ConnectionPoolSettings) {
	th := DefaultThresholds()
	if v := cp.GetHttp().GetHttp2MaxRequests(); v > 0 {
		th.MaxRequests = wrapperspb.UInt32(uint32(v))
	}
	if v := cp.GetHttp().GetHttp1MaxPendingRequests(); v > 0 {
		th.MaxPendingRequests = wrapperspb.UInt32(uint32(v))
	}
	if v := cp.GetHttp().GetMaxRetries(); v > 0 {
		th.MaxRetries = wrapperspb.UInt32(uint32(v))
	}
	if v := cp.GetTcp().GetMaxConnections(); v > 0 {
		th.MaxConnections = wrapperspb.UInt32(uint32(v))
	}
	c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{th}}
	if d := cp.GetTcp().GetConnectTimeout(); d != nil && d.AsDuration() > 0 {
		c.ConnectTimeout = durationpb.New(d.AsDuration())
	}
	if ka := cp.GetTcp().GetTcpKeepalive(); ka != nil {
		k := &corev3.TcpKeepalive{}
		if ka.GetProbes() > 0 {
			k.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
		}
		if t := ka.GetTime(); t != nil {
			k.KeepaliveTime = wrapperspb.UInt32(uint32(t.AsDuration().Seconds()))
		}
		if t := ka.GetInterval(); t != nil {
			k.KeepaliveInterval = wrapperspb.UInt32(uint32(t.AsDuration().Seconds()))
		}
		c.UpstreamConnectionOptions = &clusterv3.UpstreamConnectionOptions{TcpKeepalive: k}
	}
}

// applyHTTPOptions sets typed_extension_protocol_options HttpProtocolOptions
// when the port or the policy asks for anything: HTTP/2 for HTTP/2 ports
// (and HTTP/1 ports with h2UpgradePolicy UPGRADE, or the mesh's UPGRADE
// default), the downstream protocol with useClientProtocol, the common
// options idleTimeout (http's, else tcp's, as Istio), maxRequestsPerConnection
// and tcp.maxConnectionDuration, and, on HTTP ports, the outlier detection
// error matcher of outlierDetection.outlierDetectionHttpErrorCodes.
//
// verifyAtClient is VERIFY_CERTIFICATE_AT_CLIENT (see autoSNI).
func applyHTTPOptions(c *clusterv3.Cluster, port model.Port, policy *networking.TrafficPolicy, mesh *meshconfig.MeshConfig, verifyAtClient bool) error {
	cp, tls := policy.GetConnectionPool(), policy.GetTls()
	common := &corev3.HttpProtocolOptions{}
	hasCommon := false
	idle := cp.GetHttp().GetIdleTimeout()
	if idle == nil {
		idle = cp.GetTcp().GetIdleTimeout()
	}
	if idle != nil {
		common.IdleTimeout, hasCommon = durationpb.New(idle.AsDuration()), true
	}
	if v := cp.GetHttp().GetMaxRequestsPerConnection(); v > 0 {
		common.MaxRequestsPerConnection, hasCommon = wrapperspb.UInt32(uint32(v)), true
	}
	if d := cp.GetTcp().GetMaxConnectionDuration(); d != nil {
		common.MaxConnectionDuration, hasCommon = durationpb.New(d.AsDuration()), true
	}
	opts := &httpv3.HttpProtocolOptions{}
	if hasCommon {
		opts.CommonHttpProtocolOptions = common
	}
	if codes := policy.GetOutlierDetection().GetOutlierDetectionHttpErrorCodes(); len(codes) > 0 && port.Protocol.IsHTTP() {
		// Needs an explicit protocol below, like the common options.
		opts.OutlierDetection, hasCommon = outlierErrorMatcher(codes), true
	}
	if auto := autoSNI(tls, verifyAtClient); auto != nil {
		// Needs an explicit protocol below, like the common options.
		opts.UpstreamHttpProtocolOptions, hasCommon = auto, true
	}
	h2 := port.Protocol.IsHTTP2() || (port.Protocol.IsHTTP() && h2Upgrade(cp, mesh))
	switch {
	case port.Protocol.IsHTTP() && !port.Protocol.IsHTTP2() && cp.GetHttp().GetUseClientProtocol():
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
			UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
				HttpProtocolOptions:  &corev3.Http1ProtocolOptions{},
				Http2ProtocolOptions: http2Options(cp),
			},
		}
	case h2:
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: http2Options(cp)},
			},
		}
	case hasCommon:
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
			},
		}
	default:
		return nil
	}
	a, err := anypb.New(opts)
	if err != nil {
		return fmt.Errorf("cluster %s: typed_extension_protocol_options: %w", c.Name, err)
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{HTTPProtocolOptionsKey: a}
	return nil
}

// http2Options carries http.maxConcurrentStreams and http.http2KeepAlive.
func http2Options(cp *networking.ConnectionPoolSettings) *corev3.Http2ProtocolOptions {
	o := &corev3.Http2ProtocolOptions{}
	if v := cp.GetHttp().GetMaxConcurrentStreams(); v > 0 {
		o.MaxConcurrentStreams = wrapperspb.UInt32(uint32(v))
	}
	if ka := cp.GetHttp().GetHttp2KeepAlive(); ka != nil {
		k := &corev3.KeepaliveSettings{}
		if d := ka.GetInterval(); d != nil {
			k.Interval = durationpb.New(d.AsDuration())
		}
		if d := ka.GetTimeout(); d != nil {
			k.Timeout = durationpb.New(d.AsDuration())
		}
		o.ConnectionKeepalive = k
	}
	return o
}

// h2Upgrade reports whether HTTP/1 traffic is upgraded to HTTP/2: the
// pool's h2UpgradePolicy, or the mesh's when the pool says DEFAULT.
func h2Upgrade(cp *networking.ConnectionPoolSettings, mesh *meshconfig.MeshConfig) bool {
	switch cp.GetHttp().GetH2UpgradePolicy() {
	case networking.ConnectionPoolSettings_HTTPSettings_UPGRADE:
		return true
	case networking.ConnectionPoolSettings_HTTPSettings_DO_NOT_UPGRADE:
		return false
	}
	return mesh.GetH2UpgradePolicy() == meshconfig.MeshConfig_UPGRADE
}

// OutlierDetection converts an Istio outlierDetection as Istio does:
// success-rate ejection off, each consecutive-error detector enforced at
// 100% when its threshold is above zero. nil for nil.
func OutlierDetection(od *networking.OutlierDetection) *clusterv3.OutlierDetection {
	if od == nil {
		return nil
	}
	out := &clusterv3.OutlierDetection{EnforcingSuccessRate: wrapperspb.UInt32(0)}
	if e := od.GetConsecutive_5XxErrors(); e != nil {
		out.Consecutive_5Xx = wrapperspb.UInt32(e.GetValue())
		out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(enforcing(e.GetValue()))
	}
	if e := od.GetConsecutiveGatewayErrors(); e != nil {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(e.GetValue())
		out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(enforcing(e.GetValue()))
	}
	if d := od.GetInterval(); d != nil {
		out.Interval = durationpb.New(d.AsDuration())
	}
	if d := od.GetBaseEjectionTime(); d != nil {
		out.BaseEjectionTime = durationpb.New(d.AsDuration())
	}
	if v := od.GetMaxEjectionPercent(); v > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(min(v, 100)))
	}
	if od.GetSplitExternalLocalOriginErrors() {
		out.SplitExternalLocalOriginErrors = true
		if v := od.GetConsecutiveLocalOriginFailures().GetValue(); v > 0 {
			out.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(v)
			out.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(100)
		}
		out.EnforcingLocalOriginSuccessRate = wrapperspb.UInt32(0)
	}
	return out
}

func enforcing(threshold uint32) uint32 {
	if threshold > 0 {
		return 100
	}
	return 0
}

// applyOutlierDetection sets outlier_detection and, as Istio does, the
// healthy panic threshold to minHealthPercent (0 turns panic mode off).
func applyOutlierDetection(c *clusterv3.Cluster, od *networking.OutlierDetection) {
	if od == nil {
		return
	}
	c.OutlierDetection = OutlierDetection(od)
	if v := od.GetMinHealthPercent(); v >= 0 {
		if c.CommonLbConfig == nil {
			c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
		}
		c.CommonLbConfig.HealthyPanicThreshold = &typev3.Percent{Value: float64(min(v, 100))}
	}
}

// autoSNI is Istio's default for TLS origination (SIMPLE or MUTUAL) with
// no sni: Envoy takes the SNI from each request's host (auto_sni) and, with
// no subjectAltNames and verification on, checks the server certificate
// against it (auto_san_validation), as istiod does with ENABLE_AUTO_SNI and
// VERIFY_CERTIFICATE_AT_CLIENT, both on by default (verifyAtClient is the
// latter; off, auto_san_validation is not set). Nil when not applicable.
func autoSNI(tls *networking.ClientTLSSettings, verifyAtClient bool) *corev3.UpstreamHttpProtocolOptions {
	mode := tls.GetMode()
	if (mode != networking.ClientTLSSettings_SIMPLE && mode != networking.ClientTLSSettings_MUTUAL) || tls.GetSni() != "" {
		return nil
	}
	return &corev3.UpstreamHttpProtocolOptions{
		AutoSni:           true,
		AutoSanValidation: verifyAtClient && len(tls.GetSubjectAltNames()) == 0 && !tls.GetInsecureSkipVerify().GetValue(),
	}
}

// applyRetryBudget sets the circuit breaker's retry_budget from
// trafficPolicy.retryBudget (percent, minRetryConcurrency, budgetInterval;
// Envoy's defaults, 20% and 3, when unset). The budget replaces max_retries
// as Envoy documents. nil rb: nothing.
func applyRetryBudget(c *clusterv3.Cluster, rb *networking.TrafficPolicy_RetryBudget) {
	if rb == nil || c.CircuitBreakers == nil || len(c.CircuitBreakers.Thresholds) == 0 {
		return
	}
	b := &clusterv3.CircuitBreakers_Thresholds_RetryBudget{}
	if p := rb.GetPercent(); p != nil {
		b.BudgetPercent = &typev3.Percent{Value: max(0, min(p.GetValue(), 100))}
	}
	if v := rb.GetMinRetryConcurrency(); v > 0 {
		b.MinRetryConcurrency = wrapperspb.UInt32(v)
	}
	if d := rb.GetBudgetInterval(); d != nil && d.AsDuration() > 0 {
		b.BudgetInterval = durationpb.New(d.AsDuration())
	}
	c.CircuitBreakers.Thresholds[0].RetryBudget = b
}

// statusHeader is the HTTP/2 pseudo-header Envoy exposes the response code as.
const statusHeader = ":status"

// outlierErrorMatcher matches responses whose status is one of codes: the
// HttpProtocolOptions outlier_detection error matcher, so that only those
// count as errors towards consecutive5xxErrors and consecutiveGatewayErrors.
func outlierErrorMatcher(codes []uint32) *httpv3.HttpProtocolOptions_OutlierDetection {
	rules := make([]*commonmatcherv3.MatchPredicate, 0, len(codes))
	for _, code := range codes {
		rules = append(rules, &commonmatcherv3.MatchPredicate{Rule: &commonmatcherv3.MatchPredicate_HttpResponseHeadersMatch{
			HttpResponseHeadersMatch: &commonmatcherv3.HttpHeadersMatch{Headers: []*routev3.HeaderMatcher{{
				Name: statusHeader,
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Exact{Exact: strconv.FormatUint(uint64(code), 10)},
				}},
			}}},
		}})
	}
	m := rules[0]
	if len(rules) > 1 {
		m = &commonmatcherv3.MatchPredicate{Rule: &commonmatcherv3.MatchPredicate_OrMatch{OrMatch: &commonmatcherv3.MatchPredicate_MatchSet{Rules: rules}}}
	}
	return &httpv3.HttpProtocolOptions_OutlierDetection{ErrorMatcher: m}
}
