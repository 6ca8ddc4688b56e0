package cluster_test

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

const (
	reviewsHost     = "reviews.default.svc.cluster.local"
	ratingsHost     = "ratings.default.svc.cluster.local"
	detailsHost     = "details.default.svc.cluster.local"
	productpageHost = "productpage.default.svc.cluster.local"
)

// bookinfoWith is Bookinfo with its DestinationRules replaced by those of
// the given files (relative to the repo testdata/, or absolute).
func bookinfoWith(t *testing.T, files ...string) nt.Input {
	t.Helper()
	in := nt.Bookinfo(t)
	kept := in.Configs[:0]
	for _, c := range in.Configs {
		if c.Kind != model.KindDestinationRule {
			kept = append(kept, c)
		}
	}
	in.Configs = kept
	for _, f := range files {
		in.Configs = append(in.Configs, nt.LoadConfigs(t, f, "default")...)
	}
	return in
}

func trafficPolicyFile(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("testdata/traffic-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// buildFor builds and validates the clusters of the productpage-v1 sidecar.
func buildFor(t *testing.T, in nt.Input) map[string]*clusterv3.Cluster {
	t.Helper()
	clusters, err := cluster.Build(nt.BookinfoProxy("productpage-v1"), in.PushContext())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*clusterv3.Cluster{}
	for _, c := range clusters {
		nt.ValidateRecursively(t, c)
		out[c.Name] = c
	}
	return out
}

func must(t *testing.T, got map[string]*clusterv3.Cluster, name string) *clusterv3.Cluster {
	t.Helper()
	c := got[name]
	if c == nil {
		t.Fatalf("missing cluster %s", name)
	}
	return c
}

func upstreamTLS(t *testing.T, c *clusterv3.Cluster) *tlsv3.UpstreamTlsContext {
	t.Helper()
	ts := c.GetTransportSocket()
	if ts.GetName() != "envoy.transport_sockets.tls" {
		t.Fatalf("%s: transport socket %q, want envoy.transport_sockets.tls", c.Name, ts.GetName())
	}
	var ctx tlsv3.UpstreamTlsContext
	if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	return &ctx
}

func httpOptions(t *testing.T, c *clusterv3.Cluster) *httpv3.HttpProtocolOptions {
	t.Helper()
	a := c.GetTypedExtensionProtocolOptions()[cluster.HTTPProtocolOptionsKey]
	if a == nil {
		t.Fatalf("%s: no HttpProtocolOptions", c.Name)
	}
	var o httpv3.HttpProtocolOptions
	if err := a.UnmarshalTo(&o); err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	return &o
}

// checkAgentSDS asserts an SDS config naming secret from the agent (sds-grpc over gRPC).
func checkAgentSDS(t *testing.T, what string, s *tlsv3.SdsSecretConfig, secret string) {
	t.Helper()
	if s.GetName() != secret {
		t.Errorf("%s: secret %q, want %q", what, s.GetName(), secret)
	}
	api := s.GetSdsConfig().GetApiConfigSource()
	if api.GetApiType() != corev3.ApiConfigSource_GRPC || api.GetTransportApiVersion() != corev3.ApiVersion_V3 ||
		len(api.GetGrpcServices()) != 1 || api.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-grpc" {
		t.Errorf("%s: sds config %v, want GRPC envoy_grpc sds-grpc", what, s.GetSdsConfig())
	}
}

func sans(v *tlsv3.CertificateValidationContext) []string {
	var out []string
	for _, m := range v.GetMatchSubjectAltNames() {
		out = append(out, m.GetExact())
	}
	return out
}

func TestBookinfoDestinationRuleAll(t *testing.T) {
	got := buildFor(t, bookinfoWith(t, "bookinfo-networking/destination-rule-all.yaml"))
	for _, name := range []string{
		"outbound|9080||" + reviewsHost, "outbound|9080|v1|" + reviewsHost, "outbound|9080|v2|" + reviewsHost,
		"outbound|9080|v3|" + reviewsHost, "outbound|9080|v1|" + productpageHost, "outbound|9080|v2|" + ratingsHost,
		"outbound|9080|v2-mysql|" + ratingsHost, "outbound|9080|v2-mysql-vm|" + ratingsHost, "outbound|9080|v2|" + detailsHost,
	} {
		c := must(t, got, name)
		if c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST {
			t.Errorf("%s: lb %v, want LEAST_REQUEST (Istio's default)", name, c.GetLbPolicy())
		}
		if c.GetTransportSocket() != nil {
			t.Errorf("%s: transport socket without a tls policy", name)
		}
		th := c.GetCircuitBreakers().GetThresholds()
		if len(th) != 1 || th[0].GetMaxConnections().GetValue() != math.MaxUint32 || th[0].GetMaxRequests().GetValue() != math.MaxUint32 ||
			th[0].GetMaxPendingRequests().GetValue() != math.MaxUint32 || th[0].GetMaxRetries().GetValue() != math.MaxUint32 || !th[0].GetTrackRemaining() {
			t.Errorf("%s: circuit breakers %v, want Istio's unlimited defaults", name, c.GetCircuitBreakers())
		}
		if c.GetOutlierDetection() != nil {
			t.Errorf("%s: outlier detection without a policy", name)
		}
	}
}

func TestBookinfoDestinationRuleReviews(t *testing.T) {
	got := buildFor(t, bookinfoWith(t, "bookinfo-networking/destination-rule-reviews.yaml"))
	for _, subset := range []string{"", "v1", "v2", "v3"} {
		c := must(t, got, "outbound|9080|"+subset+"|"+reviewsHost)
		if c.GetLbPolicy() != clusterv3.Cluster_RANDOM {
			t.Errorf("%s: lb %v, want RANDOM from the rule", c.Name, c.GetLbPolicy())
		}
	}
	if lb := must(t, got, "outbound|9080||"+ratingsHost).GetLbPolicy(); lb != clusterv3.Cluster_LEAST_REQUEST {
		t.Errorf("ratings (no rule): lb %v, want LEAST_REQUEST", lb)
	}
}

func TestBookinfoDestinationRuleAllMTLS(t *testing.T) {
	in := bookinfoWith(t, "bookinfo-networking/destination-rule-all-mtls.yaml")
	var eps []*model.Endpoint
	for _, e := range in.Endpoints[reviewsHost] {
		c := *e
		c.ServiceAccount = "bookinfo-reviews"
		eps = append(eps, &c)
	}
	in.Endpoints[reviewsHost] = eps
	got := buildFor(t, in)
	for _, subset := range []string{"", "v1", "v2", "v3"} {
		c := must(t, got, "outbound|9080|"+subset+"|"+reviewsHost)
		ctx := upstreamTLS(t, c)
		if want := "outbound_.9080_." + subset + "_." + reviewsHost; ctx.GetSni() != want {
			t.Errorf("%s: sni %q, want %q", c.Name, ctx.GetSni(), want)
		}
		common := ctx.GetCommonTlsContext()
		if certs := common.GetTlsCertificateSdsSecretConfigs(); len(certs) != 1 {
			t.Errorf("%s: %d certificate sds configs, want 1", c.Name, len(certs))
		} else {
			checkAgentSDS(t, c.Name+" certificate", certs[0], "default")
		}
		cv := common.GetCombinedValidationContext()
		checkAgentSDS(t, c.Name+" validation", cv.GetValidationContextSdsSecretConfig(), "ROOTCA")
		if s := sans(cv.GetDefaultValidationContext()); !slices.Equal(s, []string{"spiffe://cluster.local/ns/default/sa/bookinfo-reviews"}) {
			t.Errorf("%s: subject alt names %v", c.Name, s)
		}
		if alpn := common.GetAlpnProtocols(); !slices.Equal(alpn, []string{"istio-peer-exchange", "istio"}) {
			t.Errorf("%s: alpn %v", c.Name, alpn)
		}
	}
	// No service accounts known: no SAN check, still ROOTCA.
	ctx := upstreamTLS(t, must(t, got, "outbound|9080|v1|"+productpageHost))
	if s := sans(ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()); len(s) != 0 {
		t.Errorf("productpage SANs %v, want none (no service accounts known)", s)
	}
}

func TestTrafficPolicyReviews(t *testing.T) {
	got := buildFor(t, bookinfoWith(t, trafficPolicyFile(t)))
	for _, subset := range []string{"", "v1", "v2"} {
		c := must(t, got, "outbound|9080|"+subset+"|"+reviewsHost)
		th := c.GetCircuitBreakers().GetThresholds()[0]
		if th.GetMaxConnections().GetValue() != 100 || th.GetMaxPendingRequests().GetValue() != 10 ||
			th.GetMaxRequests().GetValue() != 1000 || th.GetMaxRetries().GetValue() != 3 {
			t.Errorf("%s: thresholds %v", c.Name, th)
		}
		if d := c.GetConnectTimeout().AsDuration(); d != 30*time.Millisecond {
			t.Errorf("%s: connect timeout %v, want 30ms", c.Name, d)
		}
		ka := c.GetUpstreamConnectionOptions().GetTcpKeepalive()
		if ka.GetKeepaliveTime().GetValue() != 7200 || ka.GetKeepaliveInterval().GetValue() != 75 || ka.GetKeepaliveProbes().GetValue() != 3 {
			t.Errorf("%s: keepalive %v", c.Name, ka)
		}
		od := c.GetOutlierDetection()
		if od.GetConsecutive_5Xx().GetValue() != 7 || od.GetEnforcingConsecutive_5Xx().GetValue() != 100 ||
			od.GetConsecutiveGatewayFailure().GetValue() != 0 || od.GetEnforcingConsecutiveGatewayFailure().GetValue() != 0 ||
			od.GetEnforcingSuccessRate().GetValue() != 0 || od.GetEnforcingSuccessRate() == nil ||
			od.GetInterval().AsDuration() != 5*time.Minute || od.GetBaseEjectionTime().AsDuration() != 15*time.Minute ||
			od.GetMaxEjectionPercent().GetValue() != 50 {
			t.Errorf("%s: outlier detection %v", c.Name, od)
		}
		if p := c.GetCommonLbConfig().GetHealthyPanicThreshold().GetValue(); p != 30 {
			t.Errorf("%s: healthy panic threshold %v, want 30", c.Name, p)
		}
		o := httpOptions(t, c)
		common := o.GetCommonHttpProtocolOptions()
		if common.GetIdleTimeout().AsDuration() != time.Minute || common.GetMaxRequestsPerConnection().GetValue() != 10 ||
			common.GetMaxConnectionDuration().AsDuration() != time.Hour {
			t.Errorf("%s: common http options %v", c.Name, common)
		}
		if h2 := o.GetExplicitHttpConfig().GetHttp2ProtocolOptions(); h2 == nil || h2.GetMaxConcurrentStreams().GetValue() != 64 {
			t.Errorf("%s: h2UpgradePolicy UPGRADE: upstream protocol %v, want HTTP/2 with 64 streams", c.Name, o.GetUpstreamProtocolOptions())
		}
	}
	for _, subset := range []string{"", "v1"} {
		c := got["outbound|9080|"+subset+"|"+reviewsHost]
		if c.GetLbPolicy() != clusterv3.Cluster_RING_HASH || c.GetRingHashLbConfig().GetMinimumRingSize().GetValue() != 2048 {
			t.Errorf("%s: lb %v %v, want RING_HASH minimum 2048", c.Name, c.GetLbPolicy(), c.GetRingHashLbConfig())
		}
	}
	if v2 := got["outbound|9080|v2|"+reviewsHost]; v2.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST || v2.GetRingHashLbConfig() != nil {
		t.Errorf("subset v2 overrides the load balancer only: got %v %v", v2.GetLbPolicy(), v2.GetRingHashLbConfig())
	}
	// Subset port-level settings replace the whole policy for that port.
	v3 := must(t, got, "outbound|9080|v3|"+reviewsHost)
	if v3.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN || v3.GetOutlierDetection() != nil ||
		v3.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue() != math.MaxUint32 ||
		v3.GetConnectTimeout().AsDuration() != 10*time.Second {
		t.Errorf("subset v3 port-level: lb %v outlier %v breakers %v timeout %v", v3.GetLbPolicy(), v3.GetOutlierDetection(),
			v3.GetCircuitBreakers(), v3.GetConnectTimeout().AsDuration())
	}
}

func TestTrafficPolicyOthers(t *testing.T) {
	got := buildFor(t, bookinfoWith(t, trafficPolicyFile(t)))

	ratings := must(t, got, "outbound|9080||"+ratingsHost)
	if ratings.GetLbPolicy() != clusterv3.Cluster_MAGLEV || ratings.GetMaglevLbConfig().GetTableSize().GetValue() != 65537 {
		t.Errorf("ratings: lb %v %v, want MAGLEV 65537", ratings.GetLbPolicy(), ratings.GetMaglevLbConfig())
	}
	if ratings.GetCommonLbConfig().GetLocalityWeightedLbConfig() == nil {
		t.Errorf("ratings: distribute without locality_weighted_lb_config")
	}
	if d := httpOptions(t, ratings).GetUseDownstreamProtocolConfig(); d.GetHttpProtocolOptions() == nil || d.GetHttp2ProtocolOptions() == nil {
		t.Errorf("ratings: useClientProtocol: %v", d)
	}

	details := upstreamTLS(t, must(t, got, "outbound|9080||"+detailsHost))
	if details.GetSni() != "details.example.com" {
		t.Errorf("details sni %q", details.GetSni())
	}
	dc := details.GetCommonTlsContext()
	if len(dc.GetTlsCertificateSdsSecretConfigs()) != 0 {
		t.Errorf("SIMPLE presents a client certificate: %v", dc.GetTlsCertificateSdsSecretConfigs())
	}
	cv := dc.GetCombinedValidationContext()
	if s := cv.GetValidationContextSdsSecretConfig(); s.GetName() != "kubernetes://details-cred-cacert" || s.GetSdsConfig().GetAds() == nil {
		t.Errorf("details validation sds %v, want kubernetes://details-cred-cacert over ADS", s)
	}
	if s := sans(cv.GetDefaultValidationContext()); !slices.Equal(s, []string{"details.example.com"}) {
		t.Errorf("details SANs %v", s)
	}

	pp := must(t, got, "outbound|9080||"+productpageHost)
	if pp.GetLbPolicy() != clusterv3.Cluster_RING_HASH {
		t.Errorf("productpage port-level lb %v, want RING_HASH", pp.GetLbPolicy())
	}
	if pp.GetOutlierDetection() != nil {
		t.Errorf("productpage: port-level entry without outlierDetection must drop the rule's: %v", pp.GetOutlierDetection())
	}
	pc := upstreamTLS(t, pp).GetCommonTlsContext()
	if certs := pc.GetTlsCertificateSdsSecretConfigs(); len(certs) != 1 {
		t.Errorf("productpage MUTUAL: %d client certificates", len(certs))
	} else {
		checkAgentSDS(t, "productpage certificate", certs[0], "file-cert:/etc/certs/client.pem~/etc/certs/key.pem")
	}
	checkAgentSDS(t, "productpage validation", pc.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(), "file-root:/etc/certs/ca.pem")
}

func TestHashPolicy(t *testing.T) {
	push := bookinfoWith(t, trafficPolicyFile(t)).PushContext()
	dr := func(name string) *model.Config {
		svc := push.ServiceByHost(name + ".default.svc.cluster.local")
		return push.DestinationRule("default", svc)
	}
	if hp := cluster.HashPolicy(dr("reviews"), "v1", 9080); len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != "x-user" {
		t.Errorf("reviews v1: %v, want header x-user", hp)
	}
	if hp := cluster.HashPolicy(dr("reviews"), "v2", 9080); hp != nil {
		t.Errorf("reviews v2 (LEAST_REQUEST): %v, want none", hp)
	}
	if hp := cluster.HashPolicy(dr("ratings"), "", 9080); len(hp) != 1 || hp[0].GetCookie().GetName() != "user" ||
		hp[0].GetCookie().GetPath() != "/" || hp[0].GetCookie().GetTtl().AsDuration() != 10*time.Second {
		t.Errorf("ratings: %v, want cookie user / 10s", hp)
	}
	if hp := cluster.HashPolicy(dr("details"), "", 9080); len(hp) != 1 || !hp[0].GetConnectionProperties().GetSourceIp() {
		t.Errorf("details: %v, want source IP", hp)
	}
	if hp := cluster.HashPolicy(dr("productpage"), "", 9080); len(hp) != 1 || hp[0].GetQueryParameter().GetName() != "q" {
		t.Errorf("productpage: %v, want query parameter q", hp)
	}
	if hp := cluster.HashPolicy(nil, "", 9080); hp != nil {
		t.Errorf("no rule: %v", hp)
	}
	for _, hp := range cluster.HashPolicy(dr("ratings"), "", 9080) {
		nt.ValidateRecursively(t, hp)
	}
}

func TestWarnings(t *testing.T) {
	configs := nt.LoadConfigs(t, trafficPolicyFile(t), "default")
	byName := map[string][]string{}
	for i := range configs {
		byName[configs[i].Name] = cluster.Warnings(&configs[i])
	}
	if w := byName["reviews"]; len(w) != 0 {
		t.Errorf("reviews: unexpected warnings %v", w)
	}
	want := map[string][]string{
		"ratings": {
			"DestinationRule default/ratings: trafficPolicy.tunnel: ",
			"DestinationRule default/ratings: trafficPolicy.loadBalancer.warmupDurationSecs: ",
		},
		"productpage": {
			"DestinationRule default/productpage: trafficPolicy.outlierDetection.consecutiveErrors: ",
		},
	}
	for name, prefixes := range want {
		if len(byName[name]) != len(prefixes) {
			t.Errorf("%s: warnings %q, want %d", name, byName[name], len(prefixes))
		}
		for _, p := range prefixes {
			if !slices.ContainsFunc(byName[name], func(w string) bool { return strings.HasPrefix(w, p) }) {
				t.Errorf("%s: no warning starting %q in %q", name, p, byName[name])
			}
		}
	}
}
